// CIFAR readers: files loaded whole at open, records validated, planes converted to HWC on access.
#include "data/cifar.h"

#include <sstream>
#include <vector>

#include "data/file_io.h"
#include "runtime/base/error.h"

namespace tandem {
namespace data {
namespace {

constexpr int64_t kSide = 32, kPixels = 3 * kSide * kSide;

class CifarDataset : public Dataset {
 public:
  // label_bytes: 1 (CIFAR-10) or 2 (CIFAR-100, fine label second).
  CifarDataset(std::string name, const std::vector<std::string>& files, int64_t label_bytes, int64_t classes)
      : name_(std::move(name)), label_bytes_(label_bytes), classes_(classes) {
    const int64_t record = label_bytes + kPixels;
    for (const std::string& path : files) {
      std::vector<uint8_t> bytes = read_file(path);
      TD_CHECK_IO(!bytes.empty(), path, ": empty file");
      TD_CHECK_IO(static_cast<int64_t>(bytes.size()) % record == 0, path, ": truncated or corrupt: ", bytes.size(),
                  " bytes is not a whole number of ", record, "-byte records (",
                  static_cast<int64_t>(bytes.size()) / record, " records and ",
                  static_cast<int64_t>(bytes.size()) % record, " bytes left over)");
      const int64_t n = static_cast<int64_t>(bytes.size()) / record;
      for (int64_t i = 0; i < n; ++i) {
        if (label_bytes == 2)
          TD_CHECK_IO(bytes[i * record] < 20, path, ": record ", i, " has coarse label ",
                      static_cast<int>(bytes[i * record]), ", outside [0, 20)");
        int label = bytes[i * record + label_bytes - 1];
        TD_CHECK_IO(label < classes, path, ": record ", i, " has label ", label, ", outside [0, ", classes, ")");
      }
      data_.insert(data_.end(), bytes.begin(), bytes.end());
      count_ += n;
    }
  }

  int64_t size() const override { return count_; }
  int64_t num_classes() const override { return classes_; }

  Sample get(int64_t index) const override {
    TD_CHECK_INDEX(index >= 0 && index < count_, name_, ": index ", index, " out of range [0, ", count_, ")");
    const uint8_t* rec = data_.data() + index * (label_bytes_ + kPixels);
    Sample s;
    s.label = rec[label_bytes_ - 1];
    s.image.height = kSide;
    s.image.width = kSide;
    s.image.channels = 3;
    s.image.hwc.resize(kPixels);
    const uint8_t* planes = rec + label_bytes_;
    const int64_t plane = kSide * kSide;
    for (int64_t i = 0; i < plane; ++i)
      for (int64_t c = 0; c < 3; ++c) s.image.hwc[i * 3 + c] = planes[c * plane + i];
    return s;
  }

  std::string describe() const override {
    std::ostringstream os;
    os << name_ << ": " << count_ << " images 32x32x3, " << classes_ << " classes";
    return os.str();
  }

 private:
  std::string name_;
  int64_t label_bytes_, classes_;
  int64_t count_ = 0;
  std::vector<uint8_t> data_;
};

// `dir` itself when it holds `probe`, else the archive's folder inside it when that does.
std::string locate(const std::string& dir, const std::string& inner, const std::string& probe,
                   const std::string& name) {
  if (path_exists(join_path(dir, probe))) return dir;
  if (path_exists(join_path(join_path(dir, inner), probe))) return join_path(dir, inner);
  TD_THROW(IoError, name, ": ", probe, " not found in ", dir, " (nor in ", join_path(dir, inner), ")");
}

}  // namespace

std::shared_ptr<Dataset> open_cifar10(const std::string& dir, bool train) {
  std::vector<std::string> names;
  if (train)
    for (int i = 1; i <= 5; ++i) names.push_back("data_batch_" + std::to_string(i) + ".bin");
  else
    names.push_back("test_batch.bin");
  std::string root = locate(dir, "cifar-10-batches-bin", names[0], "cifar10");
  std::vector<std::string> files;
  for (const std::string& n : names) {
    std::string path = join_path(root, n);
    TD_CHECK_IO(path_exists(path), "cifar10: ", path, " is missing");
    files.push_back(path);
  }
  return std::make_shared<CifarDataset>(train ? "cifar10 train" : "cifar10 test", files, 1, 10);
}

std::shared_ptr<Dataset> open_cifar100(const std::string& dir, bool train) {
  const std::string name = train ? "train.bin" : "test.bin";
  std::string root = locate(dir, "cifar-100-binary", name, "cifar100");
  return std::make_shared<CifarDataset>(train ? "cifar100 train" : "cifar100 test",
                                        std::vector<std::string>{join_path(root, name)}, 2, 100);
}

}  // namespace data
}  // namespace tandem
