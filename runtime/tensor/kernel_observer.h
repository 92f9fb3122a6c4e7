// KernelObserver: what watches every call of a kernel interface (the stream checker; the op harness's write check),
// and the wrapper that shows it each call of a Backend: the method, its stream and the operands its args declare,
// before the kernel runs and after it returned.
#pragma once

#include <memory>
#include <vector>

#include "runtime/tensor/backend.h"

namespace tandem {

class KernelObserver {
 public:
  virtual ~KernelObserver() = default;
  virtual void before(const char* method, const Stream& s, const std::vector<Operand>& operands) = 0;
  virtual void after(const char*, const Stream&, const std::vector<Operand>&) {}
};

// The same kernels, each call shown to `observer` (both must outlive the wrapper).
std::unique_ptr<Backend> observe_backend(Backend& kernels, KernelObserver& observer);

// Runs kernel() between the observer's before and after with the operands args declares.
template <class Args, class Kernel>
void observe_call(KernelObserver& observer, const char* method, const Args& args, const Stream& s,
                  const Kernel& kernel) {
  std::vector<Operand> operands;
  args.operands([&](const Operand& o) { operands.push_back(o); });
  observer.before(method, s, operands);
  kernel();
  observer.after(method, s, operands);
}

}  // namespace tandem

// The override of X(method, Args) in a wrapper with members kernels_ (the interface) and observer_.
#define TD_KERNEL_OBSERVED(method, Args)                                          \
  void method(const Args& args, const Stream& s) override {                       \
    observe_call(observer_, #method, args, s, [&] { kernels_.method(args, s); }); \
  }
