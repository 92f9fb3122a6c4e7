// One kernel interface (Backend, NNBackend) per device type, each with its stream-checking wrapper: what the
// backends register at load and what ops look up per call.
#pragma once

#include <array>
#include <memory>

#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/memory/stream_check.h"

namespace tandem {

template <typename Kernels>
class KernelRegistry {
 public:
  using MakeChecked = std::unique_ptr<Kernels> (*)(Kernels&);
  // `what` names the kernels in the error for a device with none linked in (e.g. "neural-network kernels").
  KernelRegistry(MakeChecked make_checked, const char* what) : make_checked_(make_checked), what_(what) {}

  void set(DeviceType type, Kernels* kernels) {
    slots_[static_cast<int>(type)] = {kernels, kernels ? make_checked_(*kernels) : nullptr};
  }

  Kernels* registered(DeviceType type) const { return slots_[static_cast<int>(type)].kernels; }

  // The kernels of device's type; their stream-checking wrapper while the stream checker is on.
  Kernels& get(Device device) {
    check_device_available(device);
    Slot& slot = slots_[static_cast<int>(device.type)];
    TD_CHECK_DEVICE(slot.kernels != nullptr, "no ", what_, " for ", device,
                    " are linked into this program (depend on //kernels:all)");
    return stream_check::enabled() ? *slot.checked : *slot.kernels;
  }

 private:
  struct Slot {
    Kernels* kernels = nullptr;
    std::unique_ptr<Kernels> checked;  // the same kernels reporting to the stream checker
  };
  MakeChecked make_checked_;
  const char* what_;
  std::array<Slot, 2> slots_;
};

}  // namespace tandem
