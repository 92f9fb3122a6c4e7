// The calling thread's cuDNN handle per device (kernels/thread_handles.h), made when the thread is prepared.
#include "kernels/cudnn/handle.h"

#include "kernels/cudnn/cudnn_check.h"
#include "kernels/thread_handles.h"
#include "runtime/memory/cuda_thread.h"

namespace tandem {

namespace {
cudnnHandle_t handle(int device, bool at_setup) {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  cudnnHandle_t h = thread_handle<cudnnHandle_t, cudnnStatus_t, cudnnCreate, CUDNN_STATUS_ALLOC_FAILED>(
      device, &status, "cuDNN", at_setup);
  TD_CUDNN_CHECK(status);
  return h;
}

const bool registered = [] {
  register_cuda_thread_setup([](int device) { handle(device, true); });
  return true;
}();
}  // namespace

cudnnHandle_t cudnn_handle(int device, cudaStream_t stream) {
  cudnnHandle_t h = handle(device, false);
  TD_CUDNN_CHECK(cudnnSetStream(h, stream));
  return h;
}

}  // namespace tandem
