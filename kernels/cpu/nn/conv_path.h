// Which CPU kernel runs a pass of a convolution: one rule (in the spirit of ATen's _select_conv_backend) on the
// geometry, the dtype and the oneDNN switch, never on timings, so that results do not change from run to run.
#pragma once

#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cpu {

enum class ConvPass { forward, backward_data, backward_weight };

enum class CpuConvPath {
  gemm,     // im2col + oneDNN's sgemm (conv_gemm.h): f32 NCHW without groups, on the small planes where it wins
  onednn,   // oneDNN's convolution primitives (conv_onednn.h): other f32 cases oneDNN has a kernel for
  direct,   // conv.cc's direct kernel, where every output channel reads one input channel (depthwise)
  im2col,   // conv.cc's im2col + gemm_cpu: the rest (f64, or f32 with oneDNN switched off or without a kernel)
  widened,  // bf16 without a native kernel (cpu_native_bf16): an f32 path on widened copies, rounded once
};

// The path of `pass` of g; `bias`: whether a forward pass adds a bias (oneDNN builds another primitive then).
// The plain paths (direct, im2col) are the reference the others are tested against; they run channels-last
// operands through NCHW copies.
CpuConvPath select_cpu_conv_path(const Conv2dGeometry& g, ConvPass pass, bool bias);

const char* cpu_conv_path_name(CpuConvPath path);

}  // namespace cpu
}  // namespace tandem
