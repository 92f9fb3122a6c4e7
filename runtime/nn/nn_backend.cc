// The NNBackend registry.
#include "runtime/nn/nn_backend.h"

#include <array>
#include <memory>

#include "runtime/nn/checked_nn_backend.h"
#include "runtime/base/error.h"
#include "runtime/memory/stream_check.h"

namespace tandem {

namespace {
struct Registered {
  NNBackend* kernels = nullptr;
  std::unique_ptr<NNBackend> checked;  // the same kernels reporting to the stream checker
};
std::array<Registered, 2>& nn_registry() {
  static std::array<Registered, 2> r;
  return r;
}
}  // namespace

void register_nn_backend(DeviceType type, NNBackend* backend) {
  nn_registry()[static_cast<int>(type)] = {backend, backend ? make_checked_nn_backend(*backend) : nullptr};
}

NNBackend& nn_backend_for(Device device) {
  check_device_available(device);
  Registered& r = nn_registry()[static_cast<int>(device.type)];
  TD_CHECK_DEVICE(r.kernels != nullptr, "no neural-network kernels for ", device,
                  " are linked into this program (depend on //kernels:all)");
  return stream_check::enabled() ? *r.checked : *r.kernels;
}

}  // namespace tandem
