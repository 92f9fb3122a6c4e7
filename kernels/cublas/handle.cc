// The calling thread's cuBLAS handle per device (kernels/thread_handles.h).
#include "kernels/cublas/handle.h"

#include "kernels/cublas/cublas_check.h"
#include "kernels/thread_handles.h"

namespace tandem {

cublasHandle_t cublas_handle(int device, cudaStream_t stream) {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  std::vector<cublasHandle_t>& v =
      thread_handles<cublasHandle_t, cublasStatus_t, cublasCreate, cublasDestroy, CUBLAS_STATUS_ALLOC_FAILED>(device,
                                                                                                              &status);
  TD_CUBLAS_CHECK(status);
  TD_CUBLAS_CHECK(cublasSetStream(v[device], stream));
  return v[device];
}

}  // namespace tandem
