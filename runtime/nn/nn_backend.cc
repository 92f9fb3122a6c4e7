// The NNBackend registry.
#include "runtime/nn/nn_backend.h"

#include "runtime/nn/checked_nn_backend.h"
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
KernelRegistry<NNBackend>& nn_registry() {
  static KernelRegistry<NNBackend> r(make_checked_nn_backend, "neural-network kernels");
  return r;
}
}  // namespace

void register_nn_backend(DeviceType type, NNBackend* backend) { nn_registry().set(type, backend); }

NNBackend& nn_backend_for(Device device) { return nn_registry().get(device); }

}  // namespace tandem
