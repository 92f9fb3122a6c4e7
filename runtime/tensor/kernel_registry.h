// One kernel interface (Backend, NNBackend) per device type, each with its wrapper that shows every call to the
// stream checker and the profiler (kernel_watchers.h): what the backends register at load and what ops look up
// per call.
#pragma once

#include <array>
#include <memory>

#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/tensor/kernel_watchers.h"

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

  // The kernels of device's type; their watched wrapper while the stream checker or the profiler runs.
  Kernels& get(Device device) {
    check_device_available(device);
    Slot& slot = slots_[static_cast<int>(device.type)];
    TD_CHECK_DEVICE(slot.kernels != nullptr, "no ", what_, " for ", device,
                    " are linked into this program (depend on //kernels:all)");
    return kernels_watched() ? *slot.checked : *slot.kernels;
  }

 private:
  struct Slot {
    Kernels* kernels = nullptr;
    std::unique_ptr<Kernels> checked;  // the same kernels reporting to kernel_watchers()
  };
  MakeChecked make_checked_;
  const char* what_;
  std::array<Slot, 2> slots_;
};

}  // namespace tandem
