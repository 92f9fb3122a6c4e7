// The elementwise formulas of kernels/elementwise_ops.h applied to N values at once, so that the op switch is
// taken once per vector, not once per element. Each counts one FLOP per element for the simulated GPU's cost
// counters (an evaluation of the formula, whatever it costs in instructions).
#pragma once

#include <cuda_runtime.h>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/elementwise_ops.h"
#include "runtime/tensor/backend.h"

namespace tandem {
namespace cuda {

// The exponential in the element's own precision (softmax's too).
using elementwise::exp_of;

// v[i] = op(v[i]).
template <typename T, int N>
__device__ __forceinline__ void apply_unary(UnaryOp op, T (&v)[N], const UnaryParams& p) {
  const elementwise::Scalars<T> s = elementwise::scalars_of<T>(p);
  count_flops(N);
  elementwise::visit_unary(op, [&](auto f) {
    using F = decltype(f);
#pragma unroll
    for (int i = 0; i < N; ++i) v[i] = F::value(v[i], s);
  });
}

// g[i] becomes d op / dx times g[i], from x or y as unary_backward_reads_output says.
template <typename T, int N>
__device__ __forceinline__ void apply_unary_grad(UnaryOp op, const T (&x)[N], const T (&y)[N], T (&g)[N],
                                                 const UnaryParams& p) {
  const elementwise::Scalars<T> s = elementwise::scalars_of<T>(p);
  count_flops(N);
  elementwise::visit_unary(op, [&](auto f) {
    using F = decltype(f);
#pragma unroll
    for (int i = 0; i < N; ++i) g[i] = F::grad(x[i], y[i], g[i], s);
  });
}

// out[i] = a[i] op b[i] for the arithmetic ops.
template <typename T, int N>
__device__ __forceinline__ void apply_binary(BinaryOp op, const T (&a)[N], const T (&b)[N], T (&out)[N]) {
  count_flops(N);
  elementwise::visit_binary(op, [&](auto f) {
    using F = decltype(f);
#pragma unroll
    for (int i = 0; i < N; ++i) out[i] = F::value(a[i], b[i]);
  });
}

template <typename T>
__device__ __forceinline__ uint8_t apply_compare(BinaryOp op, T a, T b) {
  count_flops(1);
  return elementwise::compare(op, a, b);
}

}  // namespace cuda
}  // namespace tandem
