// Helpers for the CUDA-vs-CPU kernel tests: sentinel-guarded outputs, device copies of host inputs at a
// chosen misalignment, and the two backends called directly.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tensor/backend.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace testing {

constexpr uint8_t kSentinelByte = 0xA5;
constexpr int64_t kGuardElements = 19;

// A 1-D buffer of n elements of dtype t on `device`, with at least kGuardElements (a whole number of 64-byte
// lines) + `shift` elements before it and kGuardElements after, every byte set to kSentinelByte. With shift 0
// the middle is 64-byte aligned; a small nonzero shift moves it off 16-byte alignment, to exercise the
// kernels' unaligned paths.
class Guarded {
 public:
  Guarded(DType t, int64_t n, Device device, int64_t shift = 0);
  void* data() const { return middle_.raw_data(); }
  // The n middle elements seen as `shape` (a view).
  Tensor view(const Shape& shape) const { return middle_.view(shape); }
  const Tensor& middle() const { return middle_; }
  // Overwrites the middle with the bytes of a contiguous CPU tensor of n elements of the same dtype.
  void load(const Tensor& host) const;
  // EXPECTs that no byte outside the middle changed.
  void expect_intact(const std::string& what) const;

 private:
  Tensor whole_, middle_;
  int64_t before_, n_;
};

// Uniform values in [lo, hi) drawn in f64 from a fresh seed, converted to t (a contiguous CPU tensor).
Tensor random_cpu(const Shape& shape, DType t, double lo, double hi);
// The same bytes as the contiguous CPU tensor x, on cuda:0, starting `shift` elements past an aligned
// allocation (byte copies only: no kernel under test is involved).
Tensor to_gpu(const Tensor& x, int64_t shift = 0);
// A device copy of the whole storage of the CPU tensor x (kept alive by `holder`) and the address there of
// x's first element: a strided, broadcast or offset view keeps its exact layout and alignment on the GPU.
const void* gpu_mirror(const Tensor& x, Tensor& holder);
// Host copy of the bytes of a contiguous tensor (byte copy only; a CPU tensor is returned as it is).
Tensor to_host(const Tensor& x);

Backend& cpu_backend();
Backend& gpu_backend();
Stream gpu_stream();

// Tolerances for comparing CUDA results with the CPU reference: f32 math differs by a few ulps.
double tolerance(DType t);

}  // namespace testing
}  // namespace tandem
