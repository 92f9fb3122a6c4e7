// The mapped host flags through which CUDA kernels report bad indices.
#include "runtime/base/device_errors.h"

#include <cuda_runtime_api.h>

#include <atomic>
#include <mutex>
#include <vector>

#include "runtime/base/cuda_check.h"
#include "runtime/base/error.h"

namespace tandem {
namespace {
struct Flag {
  int32_t* host = nullptr;
  int32_t* device = nullptr;
};
std::mutex mu;
std::vector<Flag>& flags() {
  static auto* f = new std::vector<Flag>();
  return *f;
}
}  // namespace

int32_t* device_error_flag(int device) {
  std::lock_guard<std::mutex> lock(mu);
  auto& f = flags();
  if (f.size() <= static_cast<size_t>(device)) f.resize(device + 1);
  if (f[device].host == nullptr) {
    void* h = nullptr;
    TD_CUDA_CHECK(cudaHostAlloc(&h, sizeof(int32_t), cudaHostAllocMapped | cudaHostAllocPortable));
    *static_cast<volatile int32_t*>(h) = 0;
    void* d = nullptr;
    TD_CUDA_CHECK(cudaHostGetDevicePointer(&d, h, 0));
    f[device].host = static_cast<int32_t*>(h);
    f[device].device = static_cast<int32_t*>(d);
  }
  return f[device].device;
}

void raise_device_errors(Device device) {
  if (!device.is_cuda()) return;
  int32_t code = 0;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto& f = flags();
    if (f.size() <= static_cast<size_t>(device.index) || f[device.index].host == nullptr) return;
    volatile int32_t* h = f[device.index].host;
    code = *h;
    *h = 0;
  }
  switch (static_cast<DeviceErrorCode>(code)) {
    case DeviceErrorCode::None: return;
    case DeviceErrorCode::IndexOutOfRange:
      TD_THROW(IndexError, "a kernel on ", device, " read an index out of range (index_select, gather or scatter)");
    case DeviceErrorCode::LabelOutOfRange:
      TD_THROW(IndexError, "a kernel on ", device, " met a class label out of range (one_hot or a loss)");
  }
  TD_THROW(InternalError, "unknown device error code ", code, " on ", device);
}

}  // namespace tandem
