// The calling thread's cuDNN handle per device (kernels/thread_handles.h).
#include "kernels/cudnn/handle.h"

#include "kernels/cudnn/cudnn_check.h"
#include "kernels/thread_handles.h"

namespace tandem {

cudnnHandle_t cudnn_handle(int device, cudaStream_t stream) {
  cudnnStatus_t status = CUDNN_STATUS_SUCCESS;
  std::vector<cudnnHandle_t>& v =
      thread_handles<cudnnHandle_t, cudnnStatus_t, cudnnCreate, cudnnDestroy, CUDNN_STATUS_ALLOC_FAILED>(device,
                                                                                                         &status);
  TD_CUDNN_CHECK(status);
  TD_CUDNN_CHECK(cudnnSetStream(v[device], stream));
  return v[device];
}

}  // namespace tandem
