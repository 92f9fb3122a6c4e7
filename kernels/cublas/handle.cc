// The calling thread's cuBLAS handle per device (kernels/thread_handles.h), made when the thread is prepared.
#include "kernels/cublas/handle.h"

#include "kernels/cublas/cublas_check.h"
#include "kernels/thread_handles.h"
#include "runtime/memory/cuda_thread.h"

namespace tandem {

namespace {
cublasHandle_t handle(int device, bool at_setup) {
  cublasStatus_t status = CUBLAS_STATUS_SUCCESS;
  cublasHandle_t h = thread_handle<cublasHandle_t, cublasStatus_t, cublasCreate, CUBLAS_STATUS_ALLOC_FAILED>(
      device, &status, "cuBLAS", at_setup);
  TD_CUBLAS_CHECK(status);
  return h;
}

const bool registered = [] {
  register_cuda_thread_setup([](int device) { handle(device, true); });
  return true;
}();
}  // namespace

cublasHandle_t cublas_handle(int device, cudaStream_t stream) {
  cublasHandle_t h = handle(device, false);
  TD_CUBLAS_CHECK(cublasSetStream(h, stream));
  return h;
}

}  // namespace tandem
