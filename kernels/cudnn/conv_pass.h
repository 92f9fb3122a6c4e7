// One pass of a cuDNN convolution and its operands, as conv.cc, its algorithm choice (conv_algos.h) and its
// NCHW fallback (nchw_fallback.h) see them.
#pragma once

namespace tandem {
namespace cudnn {

enum class ConvPass { Forward, BackwardData, BackwardFilter };

inline const char* pass_name(ConvPass p) {
  return p == ConvPass::Forward ? "forward" : (p == ConvPass::BackwardData ? "backward data" : "backward weight");
}

// The two tensors a pass reads and the one it writes: forward x, w -> y; backward data dy, w -> dx; backward
// filter x, dy -> dw. With `accumulate` the pass adds its result into out (cuDNN's beta = 1).
struct ConvOperands {
  const void* in0;
  const void* in1;
  void* out;
  bool accumulate = false;
};

}  // namespace cudnn
}  // namespace tandem
