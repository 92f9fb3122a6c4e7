// TANDEM_NN_BACKEND_OVERRIDES: the declarations of every NNBackend method, for the class body of an NN backend
// that implements them all (kernels/cpu/nn, kernels/cuda/nn), so the list follows runtime/nn/nn_backend.h in one
// place (as backend_overrides.h does for Backend).
#pragma once

#include "runtime/nn/nn_backend.h"

#define TANDEM_NN_BACKEND_OVERRIDES                                                                                    \
  void conv2d_forward(const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y,                \
                      const Stream& s) override;                                                                       \
  void conv2d_backward_data(const Conv2dGeometry& g, const void* dy, const void* w, void* dx, const Stream& s)         \
      override;                                                                                                        \
  void conv2d_backward_weight(const Conv2dGeometry& g, const void* x, const void* dy, void* dw, const Stream& s)       \
      override;                                                                                                        \
  void batch_norm_forward_train(const BatchNormGeometry& g, const void* x, const void* weight, const void* bias,       \
                                double eps, double momentum, void* running_mean, void* running_var, void* y,           \
                                void* save_mean, void* save_invstd, const Stream& s) override;                         \
  void batch_norm_forward_eval(const BatchNormGeometry& g, const void* x, const void* weight, const void* bias,        \
                               const void* running_mean, const void* running_var, double eps, void* y,                 \
                               const Stream& s) override;                                                              \
  void batch_norm_backward(const BatchNormGeometry& g, bool training, const void* x, const void* dy,                   \
                           const void* weight, const void* mean, const void* invstd, void* dx, void* dweight,          \
                           void* dbias, const Stream& s) override;                                                     \
  void max_pool2d_forward(const Pool2dGeometry& g, const void* x, void* y, int32_t* indices, const Stream& s)          \
      override;                                                                                                        \
  void max_pool2d_backward(const Pool2dGeometry& g, const void* dy, const int32_t* indices, void* dx, const Stream& s) \
      override;                                                                                                        \
  void avg_pool2d_forward(const Pool2dGeometry& g, const void* x, void* y, const Stream& s) override;                  \
  void avg_pool2d_backward(const Pool2dGeometry& g, const void* dy, void* dx, const Stream& s) override;               \
  void dropout_mask(int64_t n, double p, uint64_t seed, uint64_t offset, const uint64_t* offset_delta, uint8_t* mask,  \
                    const Stream& s) override;                                                                         \
  void masked_scale(DType t, const void* x, const uint8_t* mask, double scale, void* y, int64_t n, const Stream& s)    \
      override;                                                                                                        \
  void sgd_step(DType t, int64_t count, void* const* params, const void* const* grads, void* const* momentum_buffers,  \
                const int64_t* numels, const SgdHyper& h, const Stream& s) override;                                   \
  void adam_step(DType t, int64_t count, void* const* params, const void* const* grads, void* const* exp_avg,          \
                 void* const* exp_avg_sq, const int64_t* numels, const AdamHyper& h, const Stream& s) override;
