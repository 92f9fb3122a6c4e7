// Dataset: indexed access to labelled images, and open_dataset() that builds one from a spec string.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace tandem {
namespace data {

// An 8-bit image in HWC order (channels 1 or 3).
struct Image {
  int64_t height = 0;
  int64_t width = 0;
  int64_t channels = 0;
  std::vector<uint8_t> hwc;
};

struct Sample {
  Image image;
  int64_t label = 0;
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  virtual int64_t size() const = 0;
  virtual int64_t num_classes() const = 0;
  // Sample `index` in [0, size()); thread-safe. Throws IoError naming the file and record on bad data.
  virtual Sample get(int64_t index) const = 0;
  // One line for logs, e.g. "fashion-mnist train: 60000 images 28x28x1, 10 classes".
  virtual std::string describe() const = 0;
};

// Opens a dataset from a spec (the train or test split):
//   "fashion-mnist"                the installed Debian package (dataset-fashion-mnist), or the directory in
//                                  $TANDEM_FASHION_MNIST_DIR; "fashion-mnist:DIR" reads DIR (data/idx.h)
//   "mnist:DIR" / "idx:DIR"        IDX files (plain or .gz) in DIR
//   "cifar10:DIR", "cifar100:DIR"  CIFAR binary files in DIR (data/cifar.h)
//   "folder:DIR"                   one subfolder per class of JPEG/PNG images; DIR/train and DIR/val (or
//                                  DIR/test) when DIR/train exists (data/image_folder.h)
//   "packed:PATH"                  record shards written by tools:pack: a prefix, one .tdrec file, or a
//                                  directory of train-* and val-*/test-* shards (data/record_file.h)
//   "synthetic[:k=v,...]"          seeded, class-separable images (keys: n, classes, h, w, c, seed, noise;
//                                  data/synthetic.h)
// Throws ValueError for an unknown spec and IoError for missing or corrupt files.
std::shared_ptr<Dataset> open_dataset(const std::string& spec, bool train);

}  // namespace data
}  // namespace tandem
