// The CPU backend: the reference kernels (simple, deterministic, accumulating in double where it matters).
#pragma once

#include "runtime/tensor/backend.h"

namespace tandem {
namespace cpu {

class CpuBackend : public Backend {
 public:
  TANDEM_BACKEND_OVERRIDES
};

// Plain row-major GEMM used by the CPU backend and by CPU convolution (im2col): see Backend::gemm.
template <typename T>
void gemm_cpu(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
              int64_t ldb, T beta, T* c, int64_t ldc);

}  // namespace cpu
}  // namespace tandem
