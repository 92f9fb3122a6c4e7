// Float32 and bf16 convolution through oneDNN behind the CPU backend; conv.cc's plain kernels stay the reference.
#pragma once

#include "kernels/cpu/nn/conv_path.h"
#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cpu {

// Whether oneDNN has a kernel for every piece this pass of g is split into (select_cpu_conv_path asks): the
// pieces' primitives are built and kept for the run that follows.
bool onednn_conv_supports(const Conv2dGeometry& g, ConvPass pass, bool bias);

// The passes, where onednn_conv_supports says so, on operands of g's dtype (f32, or bf16 with f32 accumulation
// and results rounded once); a bias (f32 only) is f32, and so is the weight gradient in either dtype. Results
// never depend on the number of threads.
void onednn_conv_forward(const Conv2dGeometry& g, const void* x, const void* w, const float* bias, void* y);
void onednn_conv_backward_data(const Conv2dGeometry& g, const void* dy, const void* w, void* dx);
void onednn_conv_backward_weight(const Conv2dGeometry& g, const void* x, const void* dy, float* dw);

}  // namespace cpu
}  // namespace tandem
