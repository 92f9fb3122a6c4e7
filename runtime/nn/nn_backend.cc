// The NNBackend registry.
#include "runtime/nn/nn_backend.h"

#include "runtime/nn/checked_nn_backend.h"
#include "runtime/tensor/kernel_registry.h"

namespace tandem {

namespace {
KernelRegistry<NNBackend>& nn_registry() {
  static KernelRegistry<NNBackend> r(make_checked_nn_backend, "neural-network kernels");
  return r;
}
}  // namespace

void register_nn_backend(DeviceType type, NNBackend* backend) { nn_registry().set(type, backend); }

NNBackend& nn_backend_for(Device device) { return nn_registry().get(device); }

}  // namespace tandem
