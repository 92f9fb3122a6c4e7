// Vectorized f32 batch normalization for NCHW tensors: double arithmetic in 8-lane vectors, for speed; bf16
// activations (with f32 parameters and statistics) staged plane by plane through f32.
#pragma once

#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cpu {

// Each returns false, having done nothing, unless g is f32 or bf16 NCHW and the fast kernels are on (cpu_onednn():
// TANDEM_ONEDNN=0 runs the plain kernels of batch_norm.cc, the reference). Arguments as NNBackend's: activations
// (x, y, residual, dy, dx, dresidual) of g.dtype, the per-channel operands f32. Each channel's sums run in a fixed
// order set by the shape (8 lanes per plane, lanes then planes in order), so results do not depend on the thread
// count; a bf16 plane is widened to f32 and each result computed as for f32, then rounded once to nearest even (the
// f32 kernels' bits on widened copies). The forwards fuse batch_norm_act's epilogue in the same pass:
// y = act(batch_norm(x) + residual), residual may be null.
bool batch_norm_f32_forward_train(const BatchNormGeometry& g, const void* x, const float* weight, const float* bias,
                                  double eps, double momentum, float* running_mean, float* running_var, void* y,
                                  float* save_mean, float* save_invstd, const void* residual = nullptr,
                                  BnActivation act = BnActivation::None);
bool batch_norm_f32_forward_eval(const BatchNormGeometry& g, const void* x, const float* weight, const float* bias,
                                 const float* running_mean, const float* running_var, double eps, void* y,
                                 const void* residual = nullptr, BnActivation act = BnActivation::None);

// batch_norm_act's backward operands (BatchNormActBackwardArgs; of g.dtype): dy is masked where the activated
// output y fails act's derivative (y null: no mask), and the masked gradient is written to dresidual (null:
// nowhere), or added to it with accumulate.
struct BnActGradF32 {
  const void* y = nullptr;
  BnActivation act = BnActivation::None;
  bool accumulate = false;
  void* dresidual = nullptr;
};
bool batch_norm_f32_backward(const BatchNormGeometry& g, bool training, const void* x, const void* dy,
                             const float* weight, const float* mean, const float* invstd, void* dx, float* dweight,
                             float* dbias, const BnActGradF32& act = BnActGradF32());

}  // namespace cpu
}  // namespace tandem
