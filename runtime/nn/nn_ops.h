// Neural-network ops of the front end: convolution, batch norm, pooling, dropout, memory formats, and the
// fused optimizer updates. Differentiable ops record their backward like those in ops.h.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"

namespace tandem {

// Activations are 4-D [N, C, H, W]. Their memory is either NCHW (contiguous) or channels-last (NHWC in memory,
// expressed through strides); ops accept both and return their output in the format the input suggests
// (suggests_channels_last), without converting a dense input of that format. Elementwise ops keep any dense layout.
// Whether x is dense in NHWC order (PyTorch's is_contiguous(channels_last)): the strides of size-1 dims do not
// matter, so a tensor with size-1 dims ([N, C, 1, 1] after global pooling, C = 1) can be both formats.
bool is_channels_last(const Tensor& x);
// The format an op on x produces (PyTorch's suggest_memory_format): channels-last when x's strides order its dims
// as NHWC does, NCHW when both formats fit; a contiguous tensor never suggests channels-last.
bool suggests_channels_last(const Tensor& x);
// Same values, NHWC strides: x itself when it has them, a view when x is already in NHWC order, else a copy.
Tensor to_channels_last(const Tensor& x);
// Same values, contiguous NCHW strides: x itself, a view when x is already in NCHW order, else a copy.
Tensor to_nchw(const Tensor& x);

struct Conv2dOptions {
  int64_t stride_h = 1, stride_w = 1;
  int64_t pad_h = 0, pad_w = 0;
  int64_t dilation_h = 1, dilation_w = 1;
  int64_t groups = 1;
};
// x [N, C, H, W], weight [O, C / groups, kh, kw], bias [O] or undefined.
Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o);

// Batch normalization over (N, H, W) per channel for x [N, C, H, W] (or over N for [N, C]).
// weight/bias: [C] or undefined (no affine). In training, batch statistics normalize and, when
// running_mean/running_var are defined, they are updated in place (no autograd) with `momentum`,
// the variance unbiased as in PyTorch. In evaluation the running statistics normalize.
Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps);

// The activation a fused batch norm applies after its affine and the residual's add.
enum class BnActivation : int32_t { None, Relu, Relu6 };
// act(batch_norm(x) + residual) in one pass (residual: x's shape, or undefined for none), as batch_norm followed
// by add and relu/relu6 but without their passes over memory; backward masks the gradient once and hands the
// masked gradient to the residual.
Tensor batch_norm_act(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, const Tensor& residual, BnActivation act, bool training,
                      double momentum, double eps);

struct Pool2dOptions {
  int64_t kernel_h = 2, kernel_w = 2;
  int64_t stride_h = 2, stride_w = 2;
  int64_t pad_h = 0, pad_w = 0;
  bool ceil_mode = false;
  bool count_include_pad = true;  // avg_pool2d only
};
Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o);
Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o);
Tensor global_avg_pool2d(const Tensor& x);  // [N, C, H, W] -> [N, C]

// Zeroes each element with probability p and scales the rest by 1/(1-p) in training; identity otherwise.
Tensor dropout(const Tensor& x, double p, bool training, Generator& gen);

// In-place optimizer updates (no autograd), PyTorch's formulas; on CUDA one launch updates all tensors.
// Tensors of one call share device and dtype.
struct SgdHyper {
  double lr = 0.1;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;
  bool first_step = false;  // momentum buffers are initialized to the first update (buf = d_p)
  // CUDA graphs: the learning rate read from this device double when the update runs (instead of lr), so that a
  // replayed update uses the rate set before that replay.
  const double* device_lr = nullptr;
};
// d_p = g + wd * p; buf = first ? d_p : momentum * buf + (1 - dampening) * d_p;
// d_p = nesterov ? d_p + momentum * buf : buf (when momentum != 0); p -= lr * d_p.
// momentum_buffers may be empty when momentum == 0.
void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& momentum_buffers, const SgdHyper& h);

struct AdamHyper {
  double lr = 1e-3;
  double beta1 = 0.9, beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW
  int64_t step = 1;                     // 1-based step count, for bias correction
  // CUDA graphs: three device doubles read when the update runs, computed on the host from the step and learning
  // rate of that replay: lr / (1 - beta1^step), 1 - beta2^step, 1 - lr * weight_decay (instead of lr and step).
  const double* device_coefs = nullptr;
};
// Adam: g += wd * p (or AdamW: p *= 1 - lr * wd); m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
// p -= lr / (1 - b1^t) * m / (sqrt(v / (1 - b2^t)) + eps).
void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avg,
                const std::vector<Tensor>& exp_avg_sq, const AdamHyper& h);

}  // namespace tandem
