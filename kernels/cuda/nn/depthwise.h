// The CUDA backend's own kernels for depthwise convolutions (kernels/cuda/nn/depthwise.cu), forward and backward,
// which the convolution passes (kernels/cudnn/conv.cc) take instead of cuDNN where depthwise_kernels_take says.
#pragma once

#include "runtime/memory/stream.h"
#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cuda {

// A depthwise convolution (groups == in == out channels) in channels-last f32, f64 or bf16 with at most 9 taps, not
// empty, while the switch is on (runtime/base/config.h: depthwise_kernels()).
bool depthwise_kernels_take(const Conv2dGeometry& g);
void depthwise_forward(const Conv2dForwardArgs& args, const Stream& s);  // bias (f32, f64) in the one rounding
void depthwise_backward_data(const Conv2dBackwardDataArgs& args, const Stream& s);
void depthwise_backward_weight(const Conv2dBackwardWeightArgs& args, const Stream& s);

}  // namespace cuda
}  // namespace tandem
