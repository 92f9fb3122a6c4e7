// Registers the CPU backend for DeviceType::CPU when this library is linked (alwayslink).
#include "kernels/registration.h"
#include "kernels/cpu/cpu_backend.h"

namespace tandem {
namespace cpu {
TANDEM_REGISTER_AT_LOAD(register_backend, DeviceType::CPU, CpuBackend)
}  // namespace cpu
}  // namespace tandem
