// Division by a divisor fixed for a launch, as one widening multiply and two shifts: the divisor's magic number
// is computed on the host once (Granlund and Montgomery's method). A division by a value known only at run time
// otherwise costs dozens of instructions per element on a GPU, more than a memory-bound element's other work.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

namespace tandem {
namespace cuda {

// q = n / d and r = n % d for 0 <= n < 2^32 and 1 <= d < 2^32. Four 32-bit fields: no padding in a kernel's
// parameters.
struct IntDivider {
  uint32_t divisor = 1, magic = 1, shift = 0, unused = 0;

  IntDivider() = default;
  // Host side: shift = ceil(log2(d)), magic = floor(2^32 * (2^shift - d) / d) + 1 (below 2^32).
  explicit IntDivider(uint32_t d) : divisor(d) {
    while (shift < 32 && (uint64_t{1} << shift) < d) ++shift;
    magic = static_cast<uint32_t>(((uint64_t{1} << 32) * ((uint64_t{1} << shift) - d)) / d + 1);
  }
  __host__ __device__ __forceinline__ uint32_t div(uint32_t n) const {
    const uint64_t high = (static_cast<uint64_t>(n) * magic) >> 32;
    return static_cast<uint32_t>((high + n) >> shift);
  }
  __host__ __device__ __forceinline__ uint32_t mod(uint32_t n) const { return n - div(n) * divisor; }
};

}  // namespace cuda
}  // namespace tandem
