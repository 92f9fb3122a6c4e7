// SyntheticDataset: seeded, class-separable images (a fixed random prototype per class plus per-sample noise).
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "data/dataset.h"

namespace tandem {
namespace data {

struct SyntheticOptions {
  int64_t size = 0;  // 0: 4096 for train, 1024 for test
  int64_t classes = 10;
  int64_t height = 32;
  int64_t width = 32;
  int64_t channels = 3;
  uint64_t seed = 0;
  int64_t noise = 48;  // amplitude of the uniform per-pixel noise, in 8-bit levels
};

// Parses the dataset spec "synthetic[:k=v,...]" with keys n, classes, h, w, c, seed, noise (integers); throws
// ValueError on unknown keys or bad values.
SyntheticOptions parse_synthetic_options(const std::string& spec);

// Both splits share the class prototypes (so a model trained on one generalizes to the other) and draw
// different noise and labels. get() computes each sample from (seed, split, index): no storage.
std::shared_ptr<Dataset> make_synthetic(const SyntheticOptions& options, bool train);

}  // namespace data
}  // namespace tandem
