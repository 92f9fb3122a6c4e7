// The NNBackend registry, and its wrapper that shows each call to a KernelObserver.
#include "runtime/nn/nn_backend.h"

#include "runtime/tensor/checked_backend.h"
#include "runtime/tensor/kernel_observer.h"
#include "runtime/tensor/kernel_registry.h"

namespace tandem {

Conv2dKey conv2d_key(const Conv2dGeometry& g) {
  return {static_cast<int64_t>(g.dtype),
          g.channels_last,
          g.n,
          g.c,
          g.h,
          g.w,
          g.o,
          g.kh,
          g.kw,
          g.oh,
          g.ow,
          g.stride_h,
          g.stride_w,
          g.pad_h,
          g.pad_w,
          g.dilation_h,
          g.dilation_w,
          g.groups};
}

namespace {

class ObservedNNBackend final : public NNBackend {
 public:
  ObservedNNBackend(NNBackend& kernels, KernelObserver& observer) : kernels_(kernels), observer_(observer) {}
  TD_NN_BACKEND_METHODS(TD_KERNEL_OBSERVED)

 private:
  NNBackend& kernels_;
  KernelObserver& observer_;
};

KernelRegistry<NNBackend>& nn_registry() {
  static KernelRegistry<NNBackend> r([](NNBackend& k) { return observe_nn_backend(k, stream_check_observer()); },
                                     "neural-network kernels");
  return r;
}

}  // namespace

std::unique_ptr<NNBackend> observe_nn_backend(NNBackend& kernels, KernelObserver& observer) {
  return std::make_unique<ObservedNNBackend>(kernels, observer);
}

void register_nn_backend(DeviceType type, NNBackend* backend) { nn_registry().set(type, backend); }

NNBackend* registered_nn_backend(DeviceType type) { return nn_registry().registered(type); }

NNBackend& nn_backend_for(Device device) { return nn_registry().get(device); }

}  // namespace tandem
