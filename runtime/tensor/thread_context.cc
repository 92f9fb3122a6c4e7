// Capturing and applying a ThreadContext through each runtime package's accessors of its thread-local state.
#include "runtime/tensor/thread_context.h"

#include "runtime/base/parallel_for.h"
#include "runtime/memory/stream_check.h"
#include "runtime/tensor/autograd.h"

namespace tandem {

namespace {
// The parts that have no guard of their own.
void apply(const ThreadContext& c) {
  set_current_streams(c.streams);
  autograd::set_grad_enabled(c.grad_enabled);
  set_memory_scopes(c.memory_scopes);
  if (c.intra_op_threads > 0) set_intra_op_threads(c.intra_op_threads);
  stream_check::set_current_context(c.check_context);
}
}  // namespace

ThreadContext ThreadContext::capture() {
  ThreadContext c;
  c.device = current_device();
  c.streams = current_streams();
  c.grad_enabled = autograd::grad_enabled();
  c.memory_category = current_memory_category();
  c.memory_scopes = current_memory_scopes();
  c.intra_op_threads = tandem::intra_op_threads();
  c.check_context = stream_check::current_context();
  return c;
}

ThreadContextGuard::ThreadContextGuard(const ThreadContext& context)
    : previous_(ThreadContext::capture()), device_(context.device), category_(context.memory_category) {
  apply(context);
}

ThreadContextGuard::~ThreadContextGuard() { apply(previous_); }

}  // namespace tandem
