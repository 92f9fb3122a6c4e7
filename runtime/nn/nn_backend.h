// NNBackend: the kernel interface of the neural-network ops (convolution, batch norm, pooling, dropout,
// fused optimizer steps) that each device type implements, and its registry. Kernels see pointers, shapes
// and a stream; activations are dense in either NCHW or NHWC (channels-last) memory order.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/base/device.h"
#include "runtime/base/dtype.h"
#include "runtime/memory/stream.h"
#include "runtime/nn/nn_ops.h"

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

// Per-channel statistics over (n, hw) of x [n, c, hw]; 2-D inputs [n, c] have hw = 1.
struct BatchNormGeometry {
  DType dtype = DType::F32;
  bool channels_last = false;
  int64_t n = 0, c = 0, hw = 1;
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

class NNBackend {
 public:
  virtual ~NNBackend() = default;

  // y = conv(x, w) + bias (bias may be null).
  virtual void conv2d_forward(const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y,
                              const Stream& s) = 0;
  // dx = the gradient of the input from dy (overwritten).
  virtual void conv2d_backward_data(const Conv2dGeometry& g, const void* dy, const void* w, void* dx,
                                    const Stream& s) = 0;
  // dw = the gradient of the weight from x and dy (overwritten).
  virtual void conv2d_backward_weight(const Conv2dGeometry& g, const void* x, const void* dy, void* dw,
                                      const Stream& s) = 0;

  // Training: normalizes with batch statistics, writes save_mean and save_invstd = 1/sqrt(var + eps) ([c],
  // biased variance), and when running_mean/running_var are not null updates them with `momentum` and the
  // unbiased variance. weight/bias may be null (no affine). All per-channel tensors have x's dtype.
  virtual void batch_norm_forward_train(const BatchNormGeometry& g, const void* x, const void* weight, const void* bias,
                                        double eps, double momentum, void* running_mean, void* running_var, void* y,
                                        void* save_mean, void* save_invstd, const Stream& s) = 0;
  // Evaluation: normalizes with the running statistics.
  virtual void batch_norm_forward_eval(const BatchNormGeometry& g, const void* x, const void* weight, const void* bias,
                                       const void* running_mean, const void* running_var, double eps, void* y,
                                       const Stream& s) = 0;
  // Gradients for x, weight and bias (each may be null when not needed) from mean and invstd: the saved
  // batch statistics (training; dx then includes their dependence on x) or the running ones (evaluation).
  virtual void batch_norm_backward(const BatchNormGeometry& g, bool training, const void* x, const void* dy,
                                   const void* weight, const void* mean, const void* invstd, void* dx, void* dweight,
                                   void* dbias, const Stream& s) = 0;

  // Max pooling; `indices` (i32) receives the position h * w_in + w of each maximum within its plane.
  virtual void max_pool2d_forward(const Pool2dGeometry& g, const void* x, void* y, int32_t* indices,
                                  const Stream& s) = 0;
  // dx (overwritten) from dy and the forward's indices; deterministic.
  virtual void max_pool2d_backward(const Pool2dGeometry& g, const void* dy, const int32_t* indices, void* dx,
                                   const Stream& s) = 0;
  virtual void avg_pool2d_forward(const Pool2dGeometry& g, const void* x, void* y, const Stream& s) = 0;
  virtual void avg_pool2d_backward(const Pool2dGeometry& g, const void* dy, void* dx, const Stream& s) = 0;

  // mask[i] = 1 when value i of the Philox stream (seed, offset), uniform in [0, 1) with 32 bits, is >= p.
  // offset_delta (CUDA graphs; nullptr elsewhere): a device value added to offset when the kernel runs.
  virtual void dropout_mask(int64_t n, double p, uint64_t seed, uint64_t offset, const uint64_t* offset_delta,
                            uint8_t* mask, const Stream& s) = 0;
  // y[i] = mask[i] ? x[i] * scale : 0 over n contiguous elements.
  virtual void masked_scale(DType t, const void* x, const uint8_t* mask, double scale, void* y, int64_t n,
                            const Stream& s) = 0;

  // Fused optimizer updates of `count` tensors; the pointer arrays live on the host, the pointers they hold
  // on the device. momentum_buffers is null when h.momentum == 0.
  virtual void sgd_step(DType t, int64_t count, void* const* params, const void* const* grads,
                        void* const* momentum_buffers, const int64_t* numels, const SgdHyper& h, const Stream& s) = 0;
  virtual void adam_step(DType t, int64_t count, void* const* params, const void* const* grads, void* const* exp_avg,
                         void* const* exp_avg_sq, const int64_t* numels, const AdamHyper& h, const Stream& s) = 0;
};

// Called by each NN kernel library at static-initialization time.
void register_nn_backend(DeviceType type, NNBackend* backend);
// The NN backend for `device`; throws DeviceError when it is missing or the device is absent.
NNBackend& nn_backend_for(Device device);

}  // namespace tandem
