// CUDA GEMM through cuBLAS: row-major batched products on the column-major library.
#include <cublas_v2.h>

#include "kernels/cublas/cublas_check.h"
#include "kernels/cublas/handle.h"
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/launch.h"
#include "kernels/dispatch.h"
#include "runtime/base/config.h"

namespace tandem {
namespace cuda {

void CudaBackend::gemm(const GemmArgs& args, const Stream& s) {
  if (args.m == 0 || args.n == 0 || args.batch == 0) return;
  LaunchScope ls(s);
  cublasHandle_t handle = cublas_handle(ls.device(), ls.stream());
  // A row-major matrix is its transpose in column-major order, so C = op(A) op(B) (row-major) is computed as
  // C^T = op(B)^T op(A)^T (column-major): B and A swap places and m and n swap.
  const cublasOperation_t op_b = args.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t op_a = args.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  // cuBLAS wants leading dims >= 1 even for empty operands (k = 0: C = beta * C).
  const int64_t lda = std::max<int64_t>(args.lda, 1), ldb = std::max<int64_t>(args.ldb, 1);
  TD_DISPATCH_FLOAT(args.t, "gemm", {
    const scalar_t alpha_t = static_cast<scalar_t>(args.alpha), beta_t = static_cast<scalar_t>(args.beta);
    const bool f32 = sizeof(scalar_t) == 4;
    const cudaDataType_t type = f32 ? CUDA_R_32F : CUDA_R_64F;
    const cublasComputeType_t compute =
        f32 ? (allow_tf32() ? CUBLAS_COMPUTE_32F_FAST_TF32 : CUBLAS_COMPUTE_32F_PEDANTIC) : CUBLAS_COMPUTE_64F;
    TD_CUBLAS_CHECK(cublasGemmStridedBatchedEx_64(
        handle, op_b, op_a, args.n, args.m, args.k, &alpha_t, args.b, type, ldb, args.stride_b, args.a, type, lda,
        args.stride_a, &beta_t, args.c, type, args.ldc, args.stride_c, args.batch, compute, CUBLAS_GEMM_DEFAULT));
  });
}

}  // namespace cuda
}  // namespace tandem
