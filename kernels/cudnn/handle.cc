// Per-thread cuDNN handles: a handle must not be used by two threads at once, and creating one is costly,
// so each thread keeps one per device for its lifetime.
#include "kernels/cudnn/handle.h"

#include <vector>

#include "kernels/cudnn/cudnn_check.h"
#include "runtime/memory/storage.h"

namespace tandem {

namespace {
struct ThreadHandles {
  std::vector<cudnnHandle_t> by_device;
  ~ThreadHandles() {
    // Destructors never throw: a failure to destroy at thread exit is ignored.
    for (cudnnHandle_t h : by_device)
      if (h != nullptr) cudnnDestroy(h);
  }
};
}  // namespace

cudnnHandle_t cudnn_handle(int device, cudaStream_t stream) {
  thread_local ThreadHandles handles;
  auto& v = handles.by_device;
  if (v.size() <= static_cast<size_t>(device)) v.resize(device + 1, nullptr);
  if (v[device] == nullptr) {
    cudnnStatus_t status = cudnnCreate(&v[device]);
    if (status == CUDNN_STATUS_ALLOC_FAILED) {
      // The handle's memory comes from outside the memory pool, which may hold the device's free memory.
      release_cached_memory(Device::cuda(device));
      status = cudnnCreate(&v[device]);
    }
    TD_CUDNN_CHECK(status);
  }
  TD_CUDNN_CHECK(cudnnSetStream(v[device], stream));
  return v[device];
}

}  // namespace tandem
