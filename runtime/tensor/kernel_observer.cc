// The Backend wrapper that shows each call to a KernelObserver, generated from TD_BACKEND_METHODS.
#include "runtime/tensor/kernel_observer.h"

namespace tandem {

namespace {

class ObservedBackend final : public Backend {
 public:
  ObservedBackend(Backend& kernels, KernelObserver& observer) : kernels_(kernels), observer_(observer) {}
  TD_BACKEND_METHODS(TD_KERNEL_OBSERVED)

 private:
  Backend& kernels_;
  KernelObserver& observer_;
};

}  // namespace

std::unique_ptr<Backend> observe_backend(Backend& kernels, KernelObserver& observer) {
  return std::make_unique<ObservedBackend>(kernels, observer);
}

}  // namespace tandem
