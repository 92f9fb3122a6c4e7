// Widening bf16 operands to f32 and rounding f32 results to bf16, over the CPU's threads.
#include "kernels/cpu/bf16_widen.h"

#include "runtime/base/half.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;
}  // namespace

std::vector<float> widen_bf16(const void* p, int64_t n) {
  if (p == nullptr) return {};
  std::vector<float> out(static_cast<size_t>(n));
  const uint16_t* in = static_cast<const uint16_t*>(p);
  parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) out[static_cast<size_t>(i)] = bf16_to_float(in[i]);
  });
  return out;
}

void round_to_bf16(const float* v, int64_t n, void* out) {
  uint16_t* o = static_cast<uint16_t*>(out);
  parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) o[i] = float_to_bf16(v[i]);
  });
}

}  // namespace cpu
}  // namespace tandem
