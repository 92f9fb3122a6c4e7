// ImageFolder: DIR/<class>/<image> datasets of JPEG and PNG files, classes in sorted name order.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"

namespace tandem {
namespace data {

// Classes are the subfolders of `root` in sorted order (label = position); each holds image files
// (.jpg, .jpeg, .png in any case; other files are ignored; subfolders of a class are not searched).
// Images decode to 3 channels (RGB). Throws IoError when root is missing, has no classes, or a class has no
// images; a file that does not decode throws IoError naming it when its sample is read.
class ImageFolder : public Dataset {
 public:
  ImageFolder(const std::string& root, std::string name);
  int64_t size() const override { return static_cast<int64_t>(files_.size()); }
  int64_t num_classes() const override { return static_cast<int64_t>(classes_.size()); }
  Sample get(int64_t index) const override;
  std::string describe() const override;

  const std::vector<std::string>& classes() const { return classes_; }
  const std::string& path(int64_t index) const;
  int64_t label(int64_t index) const;

 private:
  std::string root_, name_;
  std::vector<std::string> classes_;
  std::vector<std::string> files_;
  std::vector<int64_t> labels_;
};

// The split of an image folder: DIR/train for train and DIR/val (else DIR/test) for test when DIR/train
// exists, else DIR itself for either split.
std::shared_ptr<ImageFolder> open_image_folder(const std::string& dir, bool train);

}  // namespace data
}  // namespace tandem
