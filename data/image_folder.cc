// ImageFolder: directory scanning at open, file reading and decoding per sample.
#include "data/image_folder.h"

#include <algorithm>
#include <cctype>
#include <sstream>

#include "data/file_io.h"
#include "data/image_codec.h"
#include "runtime/base/error.h"

namespace tandem {
namespace data {
namespace {

bool is_image_name(const std::string& name) {
  std::string lower = name;
  std::transform(lower.begin(), lower.end(), lower.begin(), [](unsigned char c) { return std::tolower(c); });
  for (const char* ext : {".jpg", ".jpeg", ".png"}) {
    std::string e = ext;
    if (lower.size() > e.size() && lower.compare(lower.size() - e.size(), e.size(), e) == 0) return true;
  }
  return false;
}

}  // namespace

ImageFolder::ImageFolder(const std::string& root, std::string name) : root_(root), name_(std::move(name)) {
  TD_CHECK_IO(is_directory(root), name_, ": ", root, " is not a directory");
  for (const std::string& entry : list_directory(root)) {
    const std::string dir = join_path(root, entry);
    if (!is_directory(dir)) continue;
    const int64_t label = static_cast<int64_t>(classes_.size());
    size_t before = files_.size();
    for (const std::string& f : list_directory(dir)) {
      std::string path = join_path(dir, f);
      if (is_image_name(f) && !is_directory(path)) {
        files_.push_back(path);
        labels_.push_back(label);
      }
    }
    TD_CHECK_IO(files_.size() > before, name_, ": class folder ", dir, " holds no .jpg, .jpeg or .png files");
    classes_.push_back(entry);
  }
  TD_CHECK_IO(!classes_.empty(), name_, ": ", root, " has no class subfolders");
}

const std::string& ImageFolder::path(int64_t index) const {
  TD_CHECK_INDEX(index >= 0 && index < size(), name_, ": index ", index, " out of range [0, ", size(), ")");
  return files_[static_cast<size_t>(index)];
}

int64_t ImageFolder::label(int64_t index) const {
  path(index);  // range check
  return labels_[static_cast<size_t>(index)];
}

Sample ImageFolder::get(int64_t index) const {
  const std::string& file = path(index);
  std::vector<uint8_t> bytes = read_file(file);
  Sample s;
  s.image = decode_image(bytes.data(), bytes.size(), 3, file);
  s.label = labels_[static_cast<size_t>(index)];
  return s;
}

std::string ImageFolder::describe() const {
  std::ostringstream os;
  os << name_ << ": " << size() << " images in " << root_ << ", " << num_classes() << " classes";
  return os.str();
}

std::shared_ptr<ImageFolder> open_image_folder(const std::string& dir, bool train) {
  TD_CHECK_IO(is_directory(dir), "folder: ", dir, " is not a directory");
  const std::string train_dir = join_path(dir, "train");
  if (!is_directory(train_dir)) return std::make_shared<ImageFolder>(dir, "folder");
  if (train) return std::make_shared<ImageFolder>(train_dir, "folder train");
  for (const char* split : {"val", "test"}) {
    const std::string d = join_path(dir, split);
    if (is_directory(d)) return std::make_shared<ImageFolder>(d, "folder test");
  }
  TD_THROW(IoError, "folder: ", dir, " has a train/ split but no val/ or test/ split");
}

}  // namespace data
}  // namespace tandem
