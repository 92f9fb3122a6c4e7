// Registers the CUDA backend for DeviceType::CUDA when this library is linked (alwayslink).
#include "kernels/cuda/cuda_backend.h"

namespace tandem {
namespace cuda {
namespace {

const bool registered = [] {
  static CudaBackend backend;
  register_backend(DeviceType::CUDA, &backend);
  return true;
}();

}  // namespace
}  // namespace cuda
}  // namespace tandem
