// thread_handles: the per-(thread, device) handles of a CUDA library (cuBLAS, cuDNN). A handle must not be used
// by two threads at once and creating one is costly (it allocates device memory), so each thread keeps one per
// device for its lifetime.
#pragma once

#include <cstddef>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/memory/storage.h"

namespace tandem {

// The calling thread's handles, indexed by device, with the one for `device` created (Create) if it was not:
// *status is Create's status, or Status{} (success) when the handle already existed. A creation that fails for
// want of memory is tried again once after the caching allocator releases what it holds: the handle's memory
// comes from outside the memory pool, which may hold the device's free memory.
template <typename Handle, typename Status, Status (*Create)(Handle*), Status (*Destroy)(Handle), Status AllocFailed>
std::vector<Handle>& thread_handles(int device, Status* status) {
  struct Handles {
    std::vector<Handle> by_device;
    ~Handles() {
      // Destructors never throw: a failure to destroy at thread exit is ignored.
      for (Handle h : by_device)
        if (h != nullptr) Destroy(h);
    }
  };
  thread_local Handles handles;
  std::vector<Handle>& v = handles.by_device;
  if (v.size() <= static_cast<size_t>(device)) v.resize(device + 1, nullptr);
  *status = Status{};
  if (v[device] == nullptr) {
    TD_CHECK_T(GraphCaptureError, active_capture() == nullptr,
               "a CUDA library handle (cuBLAS or cuDNN) for cuda:", device,
               " would be created during the capture of a CUDA graph (creating one allocates device memory, ",
               "which a capture forbids): run the step once eagerly on this thread before capturing it");
    *status = Create(&v[device]);
    if (*status == AllocFailed) {
      release_cached_memory(Device::cuda(device));
      *status = Create(&v[device]);
    }
  }
  return v;
}

}  // namespace tandem
