// Generator: a seeded Philox stream; rand/randn draw the same values on every device for the same seed.
#pragma once

#include <cstdint>

#include "runtime/tensor/tensor.h"

namespace tandem {

// Hands out disjoint ranges of Philox counters from (seed, offset). Not thread-safe: one per thread/worker.
class Generator {
 public:
  explicit Generator(uint64_t seed = 0, uint64_t offset = 0) : seed_(seed), offset_(offset) {}
  uint64_t seed() const { return seed_; }
  uint64_t offset() const { return offset_; }
  void set_state(uint64_t seed, uint64_t offset) {
    seed_ = seed;
    offset_ = offset;
  }
  // Reserves the counters for n values and returns the first one (4 values per counter).
  uint64_t advance(int64_t n);
  // Host draws from the same stream: a uniform in [0, 1), and an integer in [0, n).
  double uniform();
  uint64_t integer(uint64_t n);

 private:
  uint64_t seed_;
  uint64_t offset_;
};

Tensor rand(const Shape& shape, Generator& gen, TensorOptions opts = {});   // uniform [0, 1)
Tensor randn(const Shape& shape, Generator& gen, TensorOptions opts = {});  // standard normal
Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, TensorOptions opts = {});
Tensor normal(const Shape& shape, double mean, double std, Generator& gen, TensorOptions opts = {});
// Fills x in place (no autograd) with values from the generator.
Tensor& uniform_(Tensor& x, double lo, double hi, Generator& gen);
Tensor& normal_(Tensor& x, double mean, double std, Generator& gen);

}  // namespace tandem
