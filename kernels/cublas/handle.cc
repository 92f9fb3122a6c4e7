// Per-thread cuBLAS handles: a handle is not safe to use from two threads at once, and creating one
// allocates device memory, so each thread keeps one per device for its lifetime.
#include "kernels/cublas/handle.h"

#include <vector>

#include "kernels/cublas/cublas_check.h"
#include "runtime/memory/storage.h"

namespace tandem {

namespace {
struct ThreadHandles {
  std::vector<cublasHandle_t> by_device;
  ~ThreadHandles() {
    // Destructors never throw: a failure to destroy at thread exit is ignored.
    for (cublasHandle_t h : by_device)
      if (h != nullptr) cublasDestroy(h);
  }
};
}  // namespace

cublasHandle_t cublas_handle(int device, cudaStream_t stream) {
  thread_local ThreadHandles handles;
  auto& v = handles.by_device;
  if (v.size() <= static_cast<size_t>(device)) v.resize(device + 1, nullptr);
  if (v[device] == nullptr) {
    cublasStatus_t status = cublasCreate(&v[device]);
    if (status == CUBLAS_STATUS_ALLOC_FAILED) {
      // The handle's workspace comes from outside the memory pool, which may hold the device's free memory.
      release_cached_memory(Device::cuda(device));
      status = cublasCreate(&v[device]);
    }
    TD_CUBLAS_CHECK(status);
  }
  TD_CUBLAS_CHECK(cublasSetStream(v[device], stream));
  return v[device];
}

}  // namespace tandem
