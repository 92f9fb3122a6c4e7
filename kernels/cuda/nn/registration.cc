// Registers the CUDA NN backend (convolutions in kernels/cudnn/conv.cc, the rest in this folder's .cu files)
// for DeviceType::CUDA when this library is linked (alwayslink).
#include "kernels/cuda/nn/cuda_nn_backend.h"

namespace tandem {
namespace cuda {
namespace {

const bool registered = [] {
  static CudaNNBackend backend;
  register_nn_backend(DeviceType::CUDA, &backend);
  return true;
}();

}  // namespace
}  // namespace cuda
}  // namespace tandem
