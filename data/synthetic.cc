// SyntheticDataset: prototypes and noise from Philox streams keyed by the seed, the class and the sample.
#include "data/synthetic.h"

#include <algorithm>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/base/philox.h"
#include "runtime/base/spec_reader.h"

namespace tandem {
namespace data {
namespace {

// Distinct Philox keys for the prototypes and each split's samples, derived from the user's seed.
uint64_t stream_key(uint64_t seed, uint64_t stream) {
  philox::Block b = philox::generate(seed, 0xD5A7A5E7000000ull + stream);
  return (static_cast<uint64_t>(b.x[0]) << 32) | b.x[1];
}

class SyntheticDataset : public Dataset {
 public:
  SyntheticDataset(const SyntheticOptions& o, bool train) : o_(o), train_(train) {
    if (o_.size == 0) o_.size = train ? 4096 : 1024;
    TD_CHECK(o_.size > 0 && o_.classes > 0 && o_.height > 0 && o_.width > 0,
             "synthetic dataset: n, classes, h and w must be positive");
    TD_CHECK(o_.channels == 1 || o_.channels == 3, "synthetic dataset: c must be 1 or 3, got ", o_.channels);
    TD_CHECK(o_.noise >= 0 && o_.noise <= 255, "synthetic dataset: noise must be in [0, 255], got ", o_.noise);
    // Prototypes are random blocks of 4x4 pixels (stored at block resolution) so that crops and flips
    // keep the classes apart.
    cells_h_ = (o_.height + 3) / 4;
    cells_w_ = (o_.width + 3) / 4;
    int64_t cells = cells_h_ * cells_w_ * o_.channels;
    prototypes_.resize(static_cast<size_t>(o_.classes * cells));
    uint64_t key = stream_key(o_.seed, 0);
    for (int64_t i = 0; i < o_.classes * cells; ++i)
      prototypes_[i] = static_cast<uint8_t>(philox::generate(key, static_cast<uint64_t>(i)).x[0] >> 24);
    sample_key_ = stream_key(o_.seed, train ? 1 : 2);
  }

  int64_t size() const override { return o_.size; }
  int64_t num_classes() const override { return o_.classes; }

  Sample get(int64_t index) const override {
    TD_CHECK_INDEX(index >= 0 && index < o_.size, "synthetic dataset: index ", index, " out of range [0, ", o_.size,
                   ")");
    int64_t pixels = o_.height * o_.width * o_.channels;
    // Counters: block 0 of a sample gives its label, blocks 1.. its noise (4 values per block).
    uint64_t base = static_cast<uint64_t>(index) << 24;
    Sample s;
    s.label = static_cast<int64_t>(philox::generate(sample_key_, base).x[0] % static_cast<uint64_t>(o_.classes));
    s.image.height = o_.height;
    s.image.width = o_.width;
    s.image.channels = o_.channels;
    s.image.hwc.resize(static_cast<size_t>(pixels));
    const uint8_t* proto = prototypes_.data() + s.label * cells_h_ * cells_w_ * o_.channels;
    int span = 2 * static_cast<int>(o_.noise) + 1;
    for (int64_t i = 0; i < pixels; i += 4) {
      philox::Block b = philox::generate(sample_key_, base + 1 + static_cast<uint64_t>(i / 4));
      for (int64_t j = 0; j < 4 && i + j < pixels; ++j) {
        int64_t p = i + j, ch = p % o_.channels, x = (p / o_.channels) % o_.width, y = p / (o_.channels * o_.width);
        int level = proto[((y / 4) * cells_w_ + x / 4) * o_.channels + ch];
        int noise = static_cast<int>(b.x[j] % static_cast<uint32_t>(span)) - static_cast<int>(o_.noise);
        s.image.hwc[p] = static_cast<uint8_t>(std::clamp(level + noise, 0, 255));
      }
    }
    return s;
  }

  std::string describe() const override {
    std::ostringstream os;
    os << "synthetic " << (train_ ? "train" : "test") << ": " << o_.size << " images " << o_.height << "x" << o_.width
       << "x" << o_.channels << ", " << o_.classes << " classes (seed " << o_.seed << ", noise " << o_.noise << ")";
    return os.str();
  }

 private:
  SyntheticOptions o_;
  bool train_;
  int64_t cells_h_ = 0, cells_w_ = 0;
  std::vector<uint8_t> prototypes_;  // [classes][cells_h][cells_w][channels]
  uint64_t sample_key_ = 0;
};

}  // namespace

SyntheticOptions parse_synthetic_options(const std::string& spec) {
  const SpecReader r("dataset spec", spec);
  SpecKeys keys(r, ',');
  SyntheticOptions o;
  o.size = keys.integer("n", o.size);
  o.classes = keys.integer("classes", o.classes);
  o.height = keys.integer("h", o.height);
  o.width = keys.integer("w", o.width);
  o.channels = keys.integer("c", o.channels);
  o.seed = static_cast<uint64_t>(keys.integer("seed", static_cast<int64_t>(o.seed)));
  o.noise = keys.integer("noise", o.noise);
  keys.finish();
  return o;
}

std::shared_ptr<Dataset> make_synthetic(const SyntheticOptions& options, bool train) {
  return std::make_shared<SyntheticDataset>(options, train);
}

}  // namespace data
}  // namespace tandem
