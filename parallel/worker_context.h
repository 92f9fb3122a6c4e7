// WorkerContext: the thread state of a worker's threads, captured on one thread and applied on another for a
// scope: the runtime's (ThreadContext: device, streams, grad mode, memory category and scopes, intra-op threads)
// and the run_on_workers call the thread belongs to (RunState, worker.h). run_on_workers gives each worker's thread
// WorkerContext::of(worker), then prepares it for CUDA (prepare_cuda_thread: handles and kernels, before any
// worker starts); an executor's comm lane captures its compute lane's and, as it must make no handle, stops there.
#pragma once

#include "parallel/worker.h"
#include "runtime/tensor/thread_context.h"

namespace tandem {
namespace parallel {

struct WorkerContext {
  ThreadContext thread;
  RunState* run = nullptr;

  // The calling thread's.
  static WorkerContext capture();
  // What a thread of worker w starts with in `run`: w's device and compute stream, w's memory scope, one intra-op
  // thread (the workers, not loops inside them, share the cores), and otherwise a new thread's state.
  static WorkerContext of(const Worker& w, RunState* run);
};

class WorkerContextGuard : NonCopyable {
 public:
  explicit WorkerContextGuard(const WorkerContext& context);

 private:
  ThreadContextGuard thread_;
  RunStateGuard run_;
};

}  // namespace parallel
}  // namespace tandem
