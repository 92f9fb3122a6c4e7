// Float32 convolution through oneDNN behind the CPU backend; conv.cc's plain kernels stay the reference.
#pragma once

#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cpu {

// Each returns false, having done nothing, where oneDNN is switched off (cpu_onednn()) or cannot run the case:
// the caller then runs the plain kernel. Results never depend on the number of threads.
bool onednn_conv_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y);
bool onednn_conv_backward_data(const Conv2dGeometry& g, const float* dy, const float* w, float* dx);
bool onednn_conv_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, float* dw);

}  // namespace cpu
}  // namespace tandem
