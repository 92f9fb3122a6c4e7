// Registers the CPU backend for DeviceType::CPU when this library is linked (alwayslink).
#include "kernels/cpu/cpu_backend.h"

namespace tandem {
namespace cpu {
namespace {

const bool registered = [] {
  static CpuBackend backend;
  register_backend(DeviceType::CPU, &backend);
  return true;
}();

}  // namespace
}  // namespace cpu
}  // namespace tandem
