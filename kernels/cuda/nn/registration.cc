// Registers the CUDA NN backend (convolutions in kernels/cudnn/conv.cc, the rest in this folder's .cu files)
// for DeviceType::CUDA when this library is linked (alwayslink).
#include "kernels/registration.h"
#include "kernels/cuda/nn/cuda_nn_backend.h"

namespace tandem {
namespace cuda {
TANDEM_REGISTER_AT_LOAD(register_nn_backend, DeviceType::CUDA, CudaNNBackend)
}  // namespace cuda
}  // namespace tandem
