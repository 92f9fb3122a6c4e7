// IDX reader: header parsing and validation, and the in-memory dataset over the decoded bytes.
#include "data/idx.h"

#include <cstdlib>
#include <sstream>
#include <vector>

#include "data/file_io.h"
#include "runtime/base/checked_math.h"
#include "runtime/base/error.h"

namespace tandem {
namespace data {
namespace {

constexpr int64_t kIdxClasses = 10;

uint32_t read_be32(const uint8_t* p) {
  return (static_cast<uint32_t>(p[0]) << 24) | (static_cast<uint32_t>(p[1]) << 16) |
         (static_cast<uint32_t>(p[2]) << 8) | p[3];
}

// Checks the header of an IDX file of u8 with `ndim` dims; returns the dims. Data starts at 4 + 4 * ndim.
std::vector<int64_t> parse_header(const std::vector<uint8_t>& bytes, int ndim, const std::string& path) {
  TD_CHECK_IO(bytes.size() >= 4, path, ": truncated IDX file (", bytes.size(), " bytes, shorter than its header)");
  uint32_t magic = read_be32(bytes.data());
  uint32_t expected = 0x00000800u | static_cast<uint32_t>(ndim);
  TD_CHECK_IO(magic == expected, path, ": wrong magic number 0x", std::hex, magic, " (expected 0x", expected, std::dec,
              ": unsigned bytes in ", ndim, " dimensions); not an IDX ", ndim == 1 ? "label" : "image", " file");
  size_t header = 4 + 4 * static_cast<size_t>(ndim);
  TD_CHECK_IO(bytes.size() >= header, path, ": truncated IDX header");
  std::vector<int64_t> dims;
  uint64_t total = 1;
  for (int d = 0; d < ndim; ++d) {
    dims.push_back(read_be32(bytes.data() + 4 + 4 * d));
    total = checked_mul<uint64_t>(total, static_cast<uint64_t>(dims.back()), path,
                                  ": corrupt IDX header (the dimensions multiply past 2^64 bytes)");
  }
  uint64_t have = bytes.size() - header;
  TD_CHECK_IO(have >= total, path, ": truncated: the header announces ", total, " bytes of data, the file has ", have);
  TD_CHECK_IO(have == total, path, ": ", have - total, " unexpected bytes after the ", total,
              " bytes of data the header announces");
  return dims;
}

class IdxDataset : public Dataset {
 public:
  IdxDataset(const std::string& images_path, const std::string& labels_path, std::string name)
      : name_(std::move(name)), images_(read_file(images_path)), labels_(read_file(labels_path)) {
    std::vector<int64_t> idims = parse_header(images_, 3, images_path);
    std::vector<int64_t> ldims = parse_header(labels_, 1, labels_path);
    TD_CHECK_IO(idims[0] == ldims[0], images_path, " holds ", idims[0], " images but ", labels_path, " holds ",
                ldims[0], " labels");
    count_ = idims[0];
    rows_ = idims[1];
    cols_ = idims[2];
    TD_CHECK_IO(count_ == 0 || (rows_ > 0 && cols_ > 0), images_path, ": images of size ", rows_, "x", cols_);
    for (int64_t i = 0; i < count_; ++i)
      TD_CHECK_IO(labels_[8 + i] < kIdxClasses, labels_path, ": record ", i, " has label ",
                  static_cast<int>(labels_[8 + i]), ", outside [0, ", kIdxClasses, ")");
  }

  int64_t size() const override { return count_; }
  int64_t num_classes() const override { return kIdxClasses; }

  Sample get(int64_t index) const override {
    TD_CHECK_INDEX(index >= 0 && index < count_, name_, ": index ", index, " out of range [0, ", count_, ")");
    Sample s;
    s.label = labels_[8 + index];
    s.image.height = rows_;
    s.image.width = cols_;
    s.image.channels = 1;
    const uint8_t* p = images_.data() + 16 + index * rows_ * cols_;
    s.image.hwc.assign(p, p + rows_ * cols_);
    return s;
  }

  std::string describe() const override {
    std::ostringstream os;
    os << name_ << ": " << count_ << " images " << rows_ << "x" << cols_ << "x1, " << kIdxClasses << " classes";
    return os.str();
  }

 private:
  std::string name_;
  std::vector<uint8_t> images_, labels_;
  int64_t count_ = 0, rows_ = 0, cols_ = 0;
};

// The first existing spelling of an IDX file in `dir`, or "" when none exists.
std::string find_idx(const std::string& dir, const std::string& split, const std::string& kind, int ndim) {
  const std::string nd = std::to_string(ndim);
  for (const std::string& stem :
       {split + "-" + kind + "-idx" + nd + "-ubyte", split + "-" + kind + ".idx" + nd + "-ubyte"})
    for (const char* ext : {"", ".gz"}) {
      std::string path = join_path(dir, stem + ext);
      if (path_exists(path)) return path;
    }
  return "";
}

}  // namespace

std::shared_ptr<Dataset> open_idx(const std::string& images_path, const std::string& labels_path,
                                  const std::string& name) {
  return std::make_shared<IdxDataset>(images_path, labels_path, name);
}

std::shared_ptr<Dataset> open_idx_dir(const std::string& dir, bool train, const std::string& name) {
  TD_CHECK_IO(is_directory(dir), name, ": ", dir, " is not a directory");
  const std::string split = train ? "train" : "t10k";
  std::string images = find_idx(dir, split, "images", 3), labels = find_idx(dir, split, "labels", 1);
  TD_CHECK_IO(!images.empty(), name, ": no ", split, "-images-idx3-ubyte[.gz] in ", dir);
  TD_CHECK_IO(!labels.empty(), name, ": no ", split, "-labels-idx1-ubyte[.gz] in ", dir);
  return open_idx(images, labels, name + (train ? " train" : " test"));
}

std::string fashion_mnist_dir() {
  const char* env = std::getenv("TANDEM_FASHION_MNIST_DIR");
  return env != nullptr && env[0] != '\0' ? env : "/usr/share/datasets/fashion-mnist";
}

std::shared_ptr<Dataset> open_fashion_mnist(bool train) {
  const std::string dir = fashion_mnist_dir();
  const char* env = std::getenv("TANDEM_FASHION_MNIST_DIR");
  bool from_env = env != nullptr && env[0] != '\0';
  TD_CHECK_IO(is_directory(dir), "Fashion-MNIST not found: ", dir, " does not exist",
              from_env ? " (set by TANDEM_FASHION_MNIST_DIR)" : "",
              ". Install the Debian package dataset-fashion-mnist (apt-get install dataset-fashion-mnist) or point "
              "TANDEM_FASHION_MNIST_DIR at a directory holding the four *-ubyte[.gz] files.");
  return open_idx_dir(dir, train, "fashion-mnist");
}

}  // namespace data
}  // namespace tandem
