// NNBackend: the kernel interface of the neural-network ops (convolution, batch norm, pooling, dropout,
// fused optimizer steps) that each device type implements, and its registry. Kernels see pointers, shapes
// and a stream; activations are dense in either NCHW or NHWC (channels-last) memory order.
#pragma once

#include <array>
#include <cstdint>
#include <memory>

#include "runtime/base/device.h"
#include "runtime/base/dtype.h"
#include "runtime/memory/stream.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/kernel_args.h"

namespace tandem {

// x [n, c, h, w] * weight [o, c / groups, kh, kw] -> y [n, o, oh, ow]. With channels_last, x, y and the
// weight (and their gradients) are dense NHWC / OHWI in memory; otherwise dense NCHW / OIHW.
struct Conv2dGeometry {
  DType dtype = DType::F32;
  bool channels_last = false;
  int64_t n = 0, c = 0, h = 0, w = 0;
  int64_t o = 0, kh = 0, kw = 0;
  int64_t oh = 0, ow = 0;
  int64_t stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0, dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};

// Every field of g, in declaration order: the key of caches of per-shape plans (oneDNN's primitives, cuDNN's
// algorithm choices).
using Conv2dKey = std::array<int64_t, 18>;
Conv2dKey conv2d_key(const Conv2dGeometry& g);
inline int64_t conv2d_weight_elements(const Conv2dGeometry& g) { return g.o * (g.c / g.groups) * g.kh * g.kw; }

// Per-channel statistics over (n, hw) of x [n, c, hw]; 2-D inputs [n, c] have hw = 1. dtype is the activations'
// (x, y, residual and their gradients); the per-channel operands (weight, bias, statistics and their gradients)
// are param_dtype(): f32 for bf16 activations (as cuDNN's batch norm and autocast), dtype otherwise.
struct BatchNormGeometry {
  DType dtype = DType::F32;
  bool channels_last = false;
  int64_t n = 0, c = 0, hw = 1;
  DType param_dtype() const { return dtype == DType::BF16 ? DType::F32 : dtype; }
};

// Windows of x [n, c, h, w] -> y [n, c, oh, ow] (the output size already includes ceil_mode). CUDA kernels take
// it by value, so every byte is a field: padding would carry stale stack bytes into the launch, where the
// simulated GPU's check of pointer-like parameter words can take them for pointers to inaccessible memory.
struct Pool2dGeometry {
  int64_t n = 0, c = 0, h = 0, w = 0, oh = 0, ow = 0;
  int64_t kernel_h = 1, kernel_w = 1, stride_h = 1, stride_w = 1, pad_h = 0, pad_w = 0;
  DType dtype = DType::F32;
  bool channels_last = false;
  bool count_include_pad = true;
  uint8_t unused[5] = {};
};
static_assert(sizeof(Pool2dGeometry) == 13 * sizeof(int64_t), "Pool2dGeometry has padding");

// The NNBackend methods' arguments, one struct each (as backend.h's for Backend). Activation operands of n images
// have g.n * (channels) * (pixels) elements, whatever their memory order.

// y = conv(x, w) + bias (bias may be null).
struct Conv2dForwardArgs {
  Conv2dGeometry g;
  const void* x;
  const void* w;
  const void* bias;
  void* y;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, g.dtype, g.n * g.c * g.h * g.w));
    f(Operand::read("w", w, g.dtype, conv2d_weight_elements(g)));
    f(Operand::read("bias", bias, g.dtype, g.o));
    f(Operand::write("y", y, g.dtype, g.n * g.o * g.oh * g.ow));
  }
};
// dx = the gradient of the input from dy (overwritten), or with `accumulate` dx = dx + that gradient (the
// gradient rounded to the dtype as it would be stored, then added in one rounding: what a separate add computes).
struct Conv2dBackwardDataArgs {
  Conv2dGeometry g;
  const void* dy;
  const void* w;
  void* dx;
  bool accumulate = false;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("dy", dy, g.dtype, g.n * g.o * g.oh * g.ow));
    f(Operand::read("w", w, g.dtype, conv2d_weight_elements(g)));
    const int64_t n = g.n * g.c * g.h * g.w;
    f(accumulate ? Operand::update("dx", dx, g.dtype, n) : Operand::write("dx", dx, g.dtype, n));
  }
};
// dw = the gradient of the weight from x and dy (overwritten).
struct Conv2dBackwardWeightArgs {
  Conv2dGeometry g;
  const void* x;
  const void* dy;
  void* dw;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, g.dtype, g.n * g.c * g.h * g.w));
    f(Operand::read("dy", dy, g.dtype, g.n * g.o * g.oh * g.ow));
    f(Operand::write("dw", dw, g.dtype, conv2d_weight_elements(g)));
  }
};

// Training: normalizes with batch statistics, writes save_mean and save_invstd = 1/sqrt(var + eps) ([c],
// biased variance), and when running_mean/running_var are not null updates them with `momentum` and the
// unbiased variance. weight/bias may be null (no affine). The per-channel tensors are g.param_dtype().
struct BatchNormTrainArgs {
  BatchNormGeometry g;
  const void* x;
  const void* weight;
  const void* bias;
  double eps, momentum;
  void* running_mean;
  void* running_var;
  void* y;
  void* save_mean;
  void* save_invstd;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, g.dtype, g.n * g.c * g.hw));
    f(Operand::read("weight", weight, g.param_dtype(), g.c));
    f(Operand::read("bias", bias, g.param_dtype(), g.c));
    f(Operand::update("running_mean", running_mean, g.param_dtype(), g.c));
    f(Operand::update("running_var", running_var, g.param_dtype(), g.c));
    f(Operand::write("y", y, g.dtype, g.n * g.c * g.hw));
    f(Operand::write("save_mean", save_mean, g.param_dtype(), g.c));
    f(Operand::write("save_invstd", save_invstd, g.param_dtype(), g.c));
  }
};
// Evaluation: normalizes with the running statistics.
struct BatchNormEvalArgs {
  BatchNormGeometry g;
  const void* x;
  const void* weight;
  const void* bias;
  const void* running_mean;
  const void* running_var;
  double eps;
  void* y;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, g.dtype, g.n * g.c * g.hw));
    f(Operand::read("weight", weight, g.param_dtype(), g.c));
    f(Operand::read("bias", bias, g.param_dtype(), g.c));
    f(Operand::read("running_mean", running_mean, g.param_dtype(), g.c));
    f(Operand::read("running_var", running_var, g.param_dtype(), g.c));
    f(Operand::write("y", y, g.dtype, g.n * g.c * g.hw));
  }
};
// Gradients for x, weight and bias (each may be null when not needed) from mean and invstd: the saved
// batch statistics (training; dx then includes their dependence on x) or the running ones (evaluation).
struct BatchNormBackwardArgs {
  BatchNormGeometry g;
  bool training;
  const void* x;
  const void* dy;
  const void* weight;
  const void* mean;
  const void* invstd;
  void* dx;
  void* dweight;
  void* dbias;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, g.dtype, g.n * g.c * g.hw));
    f(Operand::read("dy", dy, g.dtype, g.n * g.c * g.hw));
    f(Operand::read("weight", weight, g.param_dtype(), g.c));
    f(Operand::read("mean", mean, g.param_dtype(), g.c));
    f(Operand::read("invstd", invstd, g.param_dtype(), g.c));
    f(Operand::write("dx", dx, g.dtype, g.n * g.c * g.hw));
    f(Operand::write("dweight", dweight, g.param_dtype(), g.c));
    f(Operand::write("dbias", dbias, g.param_dtype(), g.c));
  }
};

// y = act(batch_norm(x) + residual) in one pass over y (ResNet's last batch norm of a block, conv-bn-relu(6));
// residual may be null. The batch norm part is bn's, with bn.y the activated output.
template <class BnArgs>
struct BatchNormActArgs {
  BnArgs bn;
  const void* residual;
  BnActivation act;
  template <class F>
  void operands(F&& f) const {
    bn.operands(f);
    f(Operand::read("residual", residual, bn.g.dtype, bn.g.n * bn.g.c * bn.g.hw));
  }
};
using BatchNormActTrainArgs = BatchNormActArgs<BatchNormTrainArgs>;
using BatchNormActEvalArgs = BatchNormActArgs<BatchNormEvalArgs>;

// The backward of BatchNormAct*: bn.dy is the gradient of the activated output y, masked by the activation's
// derivative read from y (0 < y, and y < 6 for ReLU6) before batch norm's backward. The masked gradient is the
// residual's: written to dresidual (may be null), or added to it in place with accumulate_dresidual.
// With mask_from_x (set where the forward ran in training without a residual, and y is its output) a backend may
// instead recompute y from x and the forward's per-channel operands (bn.mean, bn.invstd, bn.weight and bias, which
// may be null) with the forward's arithmetic: the same mask, without reading y.
struct BatchNormActBackwardArgs {
  BatchNormBackwardArgs bn;
  const void* y;
  BnActivation act;
  bool accumulate_dresidual;
  void* dresidual;
  const void* bias;  // the forward's (read with mask_from_x)
  bool mask_from_x;
  template <class F>
  void operands(F&& f) const {
    bn.operands(f);
    const int64_t n = bn.g.n * bn.g.c * bn.g.hw;
    f(Operand::read("y", y, bn.g.dtype, n));
    f(Operand::read("bias", bias, bn.g.param_dtype(), bn.g.c));
    if (accumulate_dresidual)
      f(Operand::update("dresidual", dresidual, bn.g.dtype, n));
    else
      f(Operand::write("dresidual", dresidual, bn.g.dtype, n));
  }
};

// Max pooling; `indices` (i32) receives the position h * w_in + w of each maximum within its plane.
struct MaxPool2dForwardArgs {
  Pool2dGeometry g;
  const void* x;
  void* y;
  int32_t* indices;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, g.dtype, g.n * g.c * g.h * g.w));
    f(Operand::write("y", y, g.dtype, g.n * g.c * g.oh * g.ow));
    f(Operand::write("indices", indices, DType::I32, g.n * g.c * g.oh * g.ow));
  }
};
// dx (overwritten) from dy and the forward's indices; deterministic.
struct MaxPool2dBackwardArgs {
  Pool2dGeometry g;
  const void* dy;
  const int32_t* indices;
  void* dx;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("dy", dy, g.dtype, g.n * g.c * g.oh * g.ow));
    f(Operand::read("indices", indices, DType::I32, g.n * g.c * g.oh * g.ow));
    f(Operand::write("dx", dx, g.dtype, g.n * g.c * g.h * g.w));
  }
};
struct AvgPool2dForwardArgs {
  Pool2dGeometry g;
  const void* x;
  void* y;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, g.dtype, g.n * g.c * g.h * g.w));
    f(Operand::write("y", y, g.dtype, g.n * g.c * g.oh * g.ow));
  }
};
struct AvgPool2dBackwardArgs {
  Pool2dGeometry g;
  const void* dy;
  void* dx;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("dy", dy, g.dtype, g.n * g.c * g.oh * g.ow));
    f(Operand::write("dx", dx, g.dtype, g.n * g.c * g.h * g.w));
  }
};

// mask[i] = 1 when value i of the Philox stream (seed, offset), uniform in [0, 1) with 32 bits, is >= p.
// offset_delta (CUDA graphs; null elsewhere): a device value added to offset when the kernel runs.
struct DropoutMaskArgs {
  int64_t n;
  double p;
  uint64_t seed, offset;
  uint8_t* mask;
  const uint64_t* offset_delta = nullptr;
  template <class F>
  void operands(F&& f) const {
    if (offset_delta != nullptr) f(Operand::read("offset_delta", offset_delta, DType::I64, 1));
    f(Operand::write("mask", mask, DType::U8, n));
  }
};
// y[i] = mask[i] ? x[i] * scale : 0 over n contiguous elements.
struct MaskedScaleArgs {
  DType t;
  const void* x;
  const uint8_t* mask;
  double scale;
  void* y;
  int64_t n;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, t, n));
    f(Operand::read("mask", mask, DType::U8, n));
    f(Operand::write("y", y, t, n));
  }
};

// Fused optimizer updates of `count` tensors; the pointer arrays live on the host, the pointers they hold
// on the device. momentum_buffers is null when h.momentum == 0.
struct SgdStepArgs {
  DType t;
  int64_t count;
  void* const* params;
  const void* const* grads;
  void* const* momentum_buffers;
  const int64_t* numels;
  SgdHyper h;
  template <class F>
  void operands(F&& f) const {
    if (h.device_lr != nullptr) f(Operand::read("device_lr", h.device_lr, DType::F64, 1));
    for (int64_t i = 0; i < count; ++i) {
      f(Operand::update("params", params[i], t, numels[i], i));
      f(Operand::read("grads", grads[i], t, numels[i], i));
      if (momentum_buffers != nullptr) f(Operand::update("momentum_buffers", momentum_buffers[i], t, numels[i], i));
    }
  }
};
struct AdamStepArgs {
  DType t;
  int64_t count;
  void* const* params;
  const void* const* grads;
  void* const* exp_avg;
  void* const* exp_avg_sq;
  const int64_t* numels;
  AdamHyper h;
  template <class F>
  void operands(F&& f) const {
    if (h.device_coefs != nullptr) f(Operand::read("device_coefs", h.device_coefs, DType::F64, 3));
    for (int64_t i = 0; i < count; ++i) {
      f(Operand::update("params", params[i], t, numels[i], i));
      f(Operand::read("grads", grads[i], t, numels[i], i));
      f(Operand::update("exp_avg", exp_avg[i], t, numels[i], i));
      f(Operand::update("exp_avg_sq", exp_avg_sq[i], t, numels[i], i));
    }
  }
};

// X(method, Args) for every NNBackend method.
#define TD_NN_BACKEND_METHODS(X)                         \
  X(conv2d_forward, Conv2dForwardArgs)                   \
  X(conv2d_backward_data, Conv2dBackwardDataArgs)        \
  X(conv2d_backward_weight, Conv2dBackwardWeightArgs)    \
  X(batch_norm_forward_train, BatchNormTrainArgs)        \
  X(batch_norm_forward_eval, BatchNormEvalArgs)          \
  X(batch_norm_backward, BatchNormBackwardArgs)          \
  X(batch_norm_act_forward_train, BatchNormActTrainArgs) \
  X(batch_norm_act_forward_eval, BatchNormActEvalArgs)   \
  X(batch_norm_act_backward, BatchNormActBackwardArgs)   \
  X(max_pool2d_forward, MaxPool2dForwardArgs)            \
  X(max_pool2d_backward, MaxPool2dBackwardArgs)          \
  X(avg_pool2d_forward, AvgPool2dForwardArgs)            \
  X(avg_pool2d_backward, AvgPool2dBackwardArgs)          \
  X(dropout_mask, DropoutMaskArgs)                       \
  X(masked_scale, MaskedScaleArgs)                       \
  X(sgd_step, SgdStepArgs)                               \
  X(adam_step, AdamStepArgs)

class NNBackend {
 public:
  virtual ~NNBackend() = default;
  TD_NN_BACKEND_METHODS(TD_KERNEL_PURE_VIRTUAL)
};

// The declarations of every NNBackend method, for the class body of an NN backend that implements them all.
#define TANDEM_NN_BACKEND_OVERRIDES TD_NN_BACKEND_METHODS(TD_KERNEL_OVERRIDE)

// The same kernels, each call shown to `observer` (as observe_backend of runtime/tensor/kernel_observer.h).
class KernelObserver;
std::unique_ptr<NNBackend> observe_nn_backend(NNBackend& kernels, KernelObserver& observer);

// Called by each NN kernel library at static-initialization time.
void register_nn_backend(DeviceType type, NNBackend* backend);
// The NN kernels registered for `type` (null: none), e.g. for a test to register a wrapper of them in their place.
NNBackend* registered_nn_backend(DeviceType type);
// The NN backend for `device`; throws DeviceError when it is missing or the device is absent.
NNBackend& nn_backend_for(Device device);

}  // namespace tandem
