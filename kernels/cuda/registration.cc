// Registers the CUDA backend for DeviceType::CUDA when this library is linked (alwayslink).
#include "kernels/registration.h"
#include "kernels/cuda/cuda_backend.h"

namespace tandem {
namespace cuda {
TANDEM_REGISTER_AT_LOAD(register_backend, DeviceType::CUDA, CudaBackend)
}  // namespace cuda
}  // namespace tandem
