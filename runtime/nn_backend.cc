// The NNBackend registry.
#include "runtime/nn_backend.h"

#include <array>

#include "runtime/error.h"

namespace tandem {

namespace {
std::array<NNBackend*, 2>& nn_registry() {
  static std::array<NNBackend*, 2> r{nullptr, nullptr};
  return r;
}
}  // namespace

void register_nn_backend(DeviceType type, NNBackend* backend) { nn_registry()[static_cast<int>(type)] = backend; }

NNBackend& nn_backend_for(Device device) {
  check_device_available(device);
  NNBackend* b = nn_registry()[static_cast<int>(device.type)];
  TD_CHECK_DEVICE(b != nullptr, "no neural-network kernels for ", device,
                  " are linked into this program (depend on //kernels:all)");
  return *b;
}

}  // namespace tandem
