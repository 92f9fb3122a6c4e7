// WorkerContext: the runtime's thread state and the worker's run, captured and applied together.
#include "parallel/worker_context.h"

namespace tandem {
namespace parallel {

WorkerContext WorkerContext::capture() { return WorkerContext{ThreadContext::capture(), current_run_state()}; }

WorkerContext WorkerContext::of(const Worker& w, RunState* run) {
  WorkerContext c;
  c.thread.device = w.compute.device();
  c.thread.streams = {w.compute};
  if (w.memory) c.thread.memory_scopes = {w.memory};
  c.thread.intra_op_threads = 1;
  c.run = run;
  return c;
}

WorkerContextGuard::WorkerContextGuard(const WorkerContext& context) : thread_(context.thread), run_(context.run) {}

}  // namespace parallel
}  // namespace tandem
