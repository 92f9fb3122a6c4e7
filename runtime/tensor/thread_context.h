// ThreadContext: the thread-local state ops run with, captured on one thread and applied on another for a scope
// (as PyTorch's ThreadLocalState and ThreadLocalStateGuard), so that a helper thread works as the thread that
// started it does: the current device and each device's current stream (stream.h), grad mode (autograd.h), the
// memory category and memory scopes allocations are charged to (memory.h), the CPU kernels' intra-op threads
// (parallel_for.h) and the stream checker's description of the work (stream_check.h). A layer above adds its own
// (parallel/worker_context.h: the run a worker's threads belong to). Not carried: a thread's own caches (oneDNN's
// streams and buffers, the CUDA libraries' handles: each thread makes its own), parallel_for's nesting flag, and a
// schedule lane's mark (LaneScope: the executor marks each lane itself).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/non_copyable.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/stream.h"

namespace tandem {

struct ThreadContext {
  Device device = Device::cpu();
  std::vector<Stream> streams;  // the current stream of each device that has one set; the others use their default
  bool grad_enabled = true;
  MemoryCategory memory_category = MemoryCategory::Activations;
  std::vector<std::shared_ptr<MemoryTracker>> memory_scopes;  // outermost first
  int intra_op_threads = 0;                                   // 0: the applying thread keeps its own
  std::shared_ptr<const std::string> check_context;           // null: none

  // The calling thread's.
  static ThreadContext capture();
};

// Applies `context` to the calling thread while in scope (also CUDA's current device); restores the thread's own
// on exit.
class ThreadContextGuard : NonCopyable {
 public:
  explicit ThreadContextGuard(const ThreadContext& context);
  ~ThreadContextGuard();

 private:
  ThreadContext previous_;
  DeviceGuard device_;
  MemoryCategoryGuard category_;
};

}  // namespace tandem
