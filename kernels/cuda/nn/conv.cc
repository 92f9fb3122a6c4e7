// The CUDA NN backend's convolutions (cuDNN) and its registration.
#include "kernels/cuda/nn/cuda_nn_backend.h"
#include "kernels/cudnn/conv.h"

namespace tandem {
namespace cuda {

void CudaNNBackend::conv2d_forward(const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y,
                                   const Stream& s) {
  cudnn::conv2d_forward(g, x, w, bias, y, s);
}

void CudaNNBackend::conv2d_backward_data(const Conv2dGeometry& g, const void* dy, const void* w, void* dx,
                                         const Stream& s) {
  cudnn::conv2d_backward_data(g, dy, w, dx, s);
}

void CudaNNBackend::conv2d_backward_weight(const Conv2dGeometry& g, const void* x, const void* dy, void* dw,
                                           const Stream& s) {
  cudnn::conv2d_backward_weight(g, x, dy, dw, s);
}

namespace {
// Registers the CUDA NN kernels when this library is linked (alwayslink).
const bool registered = [] {
  static CudaNNBackend backend;
  register_nn_backend(DeviceType::CUDA, &backend);
  return true;
}();
}  // namespace

}  // namespace cuda
}  // namespace tandem
