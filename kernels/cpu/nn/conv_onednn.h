// Float32 convolution through oneDNN behind the CPU backend; conv.cc's plain kernels stay the reference.
#pragma once

#include "kernels/cpu/nn/conv_path.h"
#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cpu {

// Whether oneDNN has a kernel for every piece this pass of g is split into (select_cpu_conv_path asks): the
// pieces' primitives are built and kept for the run that follows.
bool onednn_conv_supports(const Conv2dGeometry& g, ConvPass pass, bool bias);

// The passes, where onednn_conv_supports says so. Results never depend on the number of threads.
void onednn_conv_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y);
void onednn_conv_backward_data(const Conv2dGeometry& g, const float* dy, const float* w, float* dx);
void onednn_conv_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, float* dw);

}  // namespace cpu
}  // namespace tandem
