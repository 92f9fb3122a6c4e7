// bf16 on the CPU backend: operands widened to f32 (exactly) for kernels that compute in f32, and f32 results
// rounded once to bf16 (to nearest even): the rounding points of a bf16 kernel that accumulates in f32.
#pragma once

#include <cstdint>
#include <vector>

namespace tandem {
namespace cpu {

// n bf16 elements at p as f32 (empty when p is null).
std::vector<float> widen_bf16(const void* p, int64_t n);
// n f32 values rounded into the bf16 elements at out.
void round_to_bf16(const float* v, int64_t n, void* out);

}  // namespace cpu
}  // namespace tandem
