// thread_handles: the per-(thread, device) handles of a CUDA library (cuBLAS, cuDNN). A handle must not be used
// by two threads at once and creating one is costly (it allocates device memory), so each thread holds one per
// device while it lives and hands it to a pool when it ends, where the next thread takes it.
//
// The rule: creating a handle loads the library's module into the device's context, and the driver waits until
// every stream of the device is idle to do it (runtime/memory/cuda_thread.h). So a thread makes its handles when
// it is set up, before any stream can wait for it: prepare_cuda_thread, which run_on_workers calls on every worker
// thread. Getting one at first use stays possible for a thread that skipped it (a stall at best); inside a
// schedule's lane, where another worker's stream may wait for this very thread (an NCCL receive, a signal), a
// creation would hang on a GPU, so the stream checker's mode (TANDEM_STREAM_CHECK=1, the tests') refuses it there.
#pragma once

#include <cstddef>
#include <mutex>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/memory/storage.h"
#include "runtime/memory/stream.h"
#include "runtime/memory/stream_check.h"

namespace tandem {

// Handles of ended threads, by device. Never destroyed (threads hand theirs back at exit, whenever that is), and
// its handles never destroyed either: the process's end releases them with the context.
template <typename Handle>
class HandlePool {
 public:
  static HandlePool& get() {
    static auto* pool = new HandlePool();
    return *pool;
  }
  // A free handle of `device`, or nullptr.
  Handle take(int device) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() <= static_cast<size_t>(device) || free_[device].empty()) return nullptr;
    Handle h = free_[device].back();
    free_[device].pop_back();
    return h;
  }
  void give(int device, Handle h) {
    std::lock_guard<std::mutex> lock(mu_);
    if (free_.size() <= static_cast<size_t>(device)) free_.resize(device + 1);
    free_[device].push_back(h);
  }

 private:
  std::mutex mu_;
  std::vector<std::vector<Handle>> free_;
};

// The calling thread's handle for `device`: its own, else one from the pool, else a new one (Create): *status is
// Create's status (the handle is then null unless it succeeded), or Status{} (success) without a creation.
// `at_setup`: called by prepare_cuda_thread, not at first use. A creation that fails for want of memory is tried
// again once after the caching allocator releases what it holds: the handle's memory comes from outside the memory
// pool, which may hold the device's free memory.
template <typename Handle, typename Status, Status (*Create)(Handle*), Status AllocFailed>
Handle thread_handle(int device, Status* status, const char* library, bool at_setup) {
  struct Handles {
    std::vector<Handle> by_device;
    ~Handles() {
      for (size_t d = 0; d < by_device.size(); ++d)
        if (by_device[d] != nullptr) HandlePool<Handle>::get().give(static_cast<int>(d), by_device[d]);
    }
  };
  thread_local Handles handles;
  std::vector<Handle>& v = handles.by_device;
  if (v.size() <= static_cast<size_t>(device)) v.resize(device + 1, nullptr);
  *status = Status{};
  if (v[device] != nullptr) return v[device];
  // Checked whether or not the pool has a spare, so that a thread that skipped its setup is found every time.
  if (!at_setup && in_lane() && stream_check::enabled())
    TD_THROW(BackendError, "this thread has no ", library, " handle for cuda:", device,
             " and would get one inside a schedule's lane: making one waits for every stream of the device, one "
             "of which may wait for this thread (a hang on a GPU); prepare the thread when it starts "
             "(prepare_cuda_thread; run_on_workers does)");
  if ((v[device] = HandlePool<Handle>::get().take(device)) != nullptr) return v[device];
  TD_CHECK_T(GraphCaptureError, active_capture() == nullptr, "a ", library, " handle for cuda:", device,
             " would be created during the capture of a CUDA graph (creating one allocates device memory, which a "
             "capture forbids): prepare the thread before capturing (prepare_cuda_thread) or run the step once "
             "eagerly on it");
  *status = Create(&v[device]);
  if (*status == AllocFailed) {
    release_cached_memory(Device::cuda(device));
    *status = Create(&v[device]);
  }
  if (*status != Status{}) v[device] = nullptr;
  return v[device];
}

}  // namespace tandem
