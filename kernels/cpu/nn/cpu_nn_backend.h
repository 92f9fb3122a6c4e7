// The CPU NNBackend: reference convolution (im2col + GEMM, direct depthwise), batch norm, pooling, dropout
// and optimizer kernels; deterministic whatever the number of threads.
#pragma once

#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cpu {

class CpuNNBackend : public NNBackend {
 public:
  TANDEM_NN_BACKEND_OVERRIDES
};

// Dense layout changes of [n, c, hw] <-> [n, hw, c] (NCHW <-> NHWC, or OIHW <-> OHWI for weights).
template <typename T>
void nchw_to_nhwc(const T* src, T* dst, int64_t n, int64_t c, int64_t hw);
template <typename T>
void nhwc_to_nchw(const T* src, T* dst, int64_t n, int64_t c, int64_t hw);

}  // namespace cpu
}  // namespace tandem
