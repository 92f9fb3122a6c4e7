// NNBackend wrapper that reports every kernel's operands to the stream checker (as checked_backend.cc does for
// the tensor kernels).
#include "runtime/nn/checked_nn_backend.h"

#include <vector>

#include "runtime/memory/stream_check.h"

namespace tandem {

namespace {

using stream_check::on_op;
using stream_check::reads;
using stream_check::writes;

// The operands of a fused optimizer step: the tensors each host array points to.
void add_list(std::vector<stream_check::Access>& out, int64_t count, const void* const* list, bool write) {
  if (list == nullptr) return;
  for (int64_t i = 0; i < count; ++i) out.push_back(write ? writes(list[i]) : reads(list[i]));
}

class CheckedNNBackend final : public NNBackend {
 public:
  explicit CheckedNNBackend(NNBackend& k) : k_(k) {}

  void conv2d_forward(const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y,
                      const Stream& s) override {
    on_op("conv2d_forward", s, {reads(x), reads(w), reads(bias), writes(y)});
    k_.conv2d_forward(g, x, w, bias, y, s);
  }
  void conv2d_backward_data(const Conv2dGeometry& g, const void* dy, const void* w, void* dx,
                            const Stream& s) override {
    on_op("conv2d_backward_data", s, {reads(dy), reads(w), writes(dx)});
    k_.conv2d_backward_data(g, dy, w, dx, s);
  }
  void conv2d_backward_weight(const Conv2dGeometry& g, const void* x, const void* dy, void* dw,
                              const Stream& s) override {
    on_op("conv2d_backward_weight", s, {reads(x), reads(dy), writes(dw)});
    k_.conv2d_backward_weight(g, x, dy, dw, s);
  }
  void batch_norm_forward_train(const BatchNormGeometry& g, const void* x, const void* weight, const void* bias,
                                double eps, double momentum, void* running_mean, void* running_var, void* y,
                                void* save_mean, void* save_invstd, const Stream& s) override {
    on_op("batch_norm_forward_train", s,
          {reads(x), reads(weight), reads(bias), writes(running_mean), writes(running_var), writes(y),
           writes(save_mean), writes(save_invstd)});
    k_.batch_norm_forward_train(g, x, weight, bias, eps, momentum, running_mean, running_var, y, save_mean, save_invstd,
                                s);
  }
  void batch_norm_forward_eval(const BatchNormGeometry& g, const void* x, const void* weight, const void* bias,
                               const void* running_mean, const void* running_var, double eps, void* y,
                               const Stream& s) override {
    on_op("batch_norm_forward_eval", s,
          {reads(x), reads(weight), reads(bias), reads(running_mean), reads(running_var), writes(y)});
    k_.batch_norm_forward_eval(g, x, weight, bias, running_mean, running_var, eps, y, s);
  }
  void batch_norm_backward(const BatchNormGeometry& g, bool training, const void* x, const void* dy, const void* weight,
                           const void* mean, const void* invstd, void* dx, void* dweight, void* dbias,
                           const Stream& s) override {
    on_op("batch_norm_backward", s,
          {reads(x), reads(dy), reads(weight), reads(mean), reads(invstd), writes(dx), writes(dweight), writes(dbias)});
    k_.batch_norm_backward(g, training, x, dy, weight, mean, invstd, dx, dweight, dbias, s);
  }
  void max_pool2d_forward(const Pool2dGeometry& g, const void* x, void* y, int32_t* indices, const Stream& s) override {
    on_op("max_pool2d_forward", s, {reads(x), writes(y), writes(indices)});
    k_.max_pool2d_forward(g, x, y, indices, s);
  }
  void max_pool2d_backward(const Pool2dGeometry& g, const void* dy, const int32_t* indices, void* dx,
                           const Stream& s) override {
    on_op("max_pool2d_backward", s, {reads(dy), reads(indices), writes(dx)});
    k_.max_pool2d_backward(g, dy, indices, dx, s);
  }
  void avg_pool2d_forward(const Pool2dGeometry& g, const void* x, void* y, const Stream& s) override {
    on_op("avg_pool2d_forward", s, {reads(x), writes(y)});
    k_.avg_pool2d_forward(g, x, y, s);
  }
  void avg_pool2d_backward(const Pool2dGeometry& g, const void* dy, void* dx, const Stream& s) override {
    on_op("avg_pool2d_backward", s, {reads(dy), writes(dx)});
    k_.avg_pool2d_backward(g, dy, dx, s);
  }
  void dropout_mask(int64_t n, double p, uint64_t seed, uint64_t offset, const uint64_t* offset_delta, uint8_t* mask,
                    const Stream& s) override {
    on_op("dropout_mask", s, {writes(mask)});
    k_.dropout_mask(n, p, seed, offset, offset_delta, mask, s);
  }
  void masked_scale(DType t, const void* x, const uint8_t* mask, double scale, void* y, int64_t n,
                    const Stream& s) override {
    on_op("masked_scale", s, {reads(x), reads(mask), writes(y)});
    k_.masked_scale(t, x, mask, scale, y, n, s);
  }
  void sgd_step(DType t, int64_t count, void* const* params, const void* const* grads, void* const* momentum_buffers,
                const int64_t* numels, const SgdHyper& h, const Stream& s) override {
    std::vector<stream_check::Access> a;
    add_list(a, count, params, true);
    add_list(a, count, grads, false);
    add_list(a, count, momentum_buffers, true);
    on_op("sgd_step", s, a.data(), a.size());
    k_.sgd_step(t, count, params, grads, momentum_buffers, numels, h, s);
  }
  void adam_step(DType t, int64_t count, void* const* params, const void* const* grads, void* const* exp_avg,
                 void* const* exp_avg_sq, const int64_t* numels, const AdamHyper& h, const Stream& s) override {
    std::vector<stream_check::Access> a;
    add_list(a, count, params, true);
    add_list(a, count, grads, false);
    add_list(a, count, exp_avg, true);
    add_list(a, count, exp_avg_sq, true);
    on_op("adam_step", s, a.data(), a.size());
    k_.adam_step(t, count, params, grads, exp_avg, exp_avg_sq, numels, h, s);
  }

 private:
  NNBackend& k_;
};

}  // namespace

std::unique_ptr<NNBackend> make_checked_nn_backend(NNBackend& kernels) {
  return std::make_unique<CheckedNNBackend>(kernels);
}

}  // namespace tandem
