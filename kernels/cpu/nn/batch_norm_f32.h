// Vectorized f32 batch normalization for NCHW tensors: double arithmetic in 8-lane vectors, for speed.
#pragma once

#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cpu {

// Each returns false, having done nothing, unless g is f32 NCHW and the fast f32 kernels are on (cpu_onednn():
// TANDEM_ONEDNN=0 runs the plain kernels of batch_norm.cc, the reference). Arguments as NNBackend's. Each
// channel's sums run in a fixed order set by the shape (8 lanes per plane, lanes then planes in order), so
// results do not depend on the thread count. The forwards fuse batch_norm_act's epilogue in the same pass:
// y = act(batch_norm(x) + residual), residual may be null.
bool batch_norm_f32_forward_train(const BatchNormGeometry& g, const float* x, const float* weight, const float* bias,
                                  double eps, double momentum, float* running_mean, float* running_var, float* y,
                                  float* save_mean, float* save_invstd, const float* residual = nullptr,
                                  BnActivation act = BnActivation::None);
bool batch_norm_f32_forward_eval(const BatchNormGeometry& g, const float* x, const float* weight, const float* bias,
                                 const float* running_mean, const float* running_var, double eps, float* y,
                                 const float* residual = nullptr, BnActivation act = BnActivation::None);

// batch_norm_act's backward operands (BatchNormActBackwardArgs): dy is masked where the activated output y fails
// act's derivative (y null: no mask), and the masked gradient is written to dresidual (null: nowhere), or added
// to it with accumulate.
struct BnActGradF32 {
  const float* y = nullptr;
  BnActivation act = BnActivation::None;
  bool accumulate = false;
  float* dresidual = nullptr;
};
bool batch_norm_f32_backward(const BatchNormGeometry& g, bool training, const float* x, const float* dy,
                             const float* weight, const float* mean, const float* invstd, float* dx, float* dweight,
                             float* dbias, const BnActGradF32& act = BnActGradF32());

}  // namespace cpu
}  // namespace tandem
