// Backend and NNBackend wrappers that report every kernel's operands to the stream checker. Operands count as
// their whole storage: kernels of two streams on disjoint parts of one storage would be reported (none exist).
#include "runtime/checked_backend.h"

#include <vector>

#include "runtime/stream_check.h"

namespace tandem {

namespace {

using stream_check::on_op;
using stream_check::reads;
using stream_check::writes;

class CheckedBackend final : public Backend {
 public:
  explicit CheckedBackend(Backend& k) : k_(k) {}

  void fill(DType t, void* dst, const StridedDesc& d, double value, const Stream& s) override {
    on_op("fill", s, {writes(dst)});
    k_.fill(t, dst, d, value, s);
  }
  void copy(DType src_t, const void* src, const StridedDesc& src_d, DType dst_t, void* dst,
            const StridedDesc& dst_d, const Stream& s) override {
    on_op("copy", s, {reads(src), writes(dst)});
    k_.copy(src_t, src, src_d, dst_t, dst, dst_d, s);
  }
  void unary(UnaryOp op, DType t, const void* x, void* y, int64_t n, UnaryParams p, const Stream& s) override {
    on_op("unary", s, {reads(x), writes(y)});
    k_.unary(op, t, x, y, n, p, s);
  }
  void unary_backward(UnaryOp op, DType t, const void* x, const void* y, const void* gy, void* gx, int64_t n,
                      UnaryParams p, const Stream& s) override {
    on_op("unary_backward", s, {reads(x), reads(y), reads(gy), writes(gx)});
    k_.unary_backward(op, t, x, y, gy, gx, n, p, s);
  }
  void binary(BinaryOp op, DType t, const void* a, const StridedDesc& ad, const void* b, const StridedDesc& bd,
              void* out, const StridedDesc& od, const Stream& s) override {
    on_op("binary", s, {reads(a), reads(b), writes(out)});
    k_.binary(op, t, a, ad, b, bd, out, od, s);
  }
  void where(const void* cond, const StridedDesc& cd, DType t, const void* a, const StridedDesc& ad, const void* b,
             const StridedDesc& bd, void* out, const StridedDesc& od, const Stream& s) override {
    on_op("where", s, {reads(cond), reads(a), reads(b), writes(out)});
    k_.where(cond, cd, t, a, ad, b, bd, out, od, s);
  }
  void reduce(ReduceOp op, DType t, const void* x, int64_t outer, int64_t r, int64_t inner, void* out,
              int64_t* indices, const Stream& s) override {
    on_op("reduce", s, {reads(x), writes(out), writes(indices)});
    k_.reduce(op, t, x, outer, r, inner, out, indices, s);
  }
  void softmax(bool log, DType t, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
               const Stream& s) override {
    on_op("softmax", s, {reads(x), writes(y)});
    k_.softmax(log, t, x, y, outer, n, inner, s);
  }
  void softmax_backward(bool log, DType t, const void* y, const void* gy, void* gx, int64_t outer, int64_t n,
                        int64_t inner, const Stream& s) override {
    on_op("softmax_backward", s, {reads(y), reads(gy), writes(gx)});
    k_.softmax_backward(log, t, y, gy, gx, outer, n, inner, s);
  }
  void gemm(DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
            int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, double beta, void* c,
            int64_t ldc, int64_t stride_c, int64_t batch, const Stream& s) override {
    on_op("gemm", s, {reads(a), reads(b), writes(c)});
    k_.gemm(t, trans_a, trans_b, m, n, k, alpha, a, lda, stride_a, b, ldb, stride_b, beta, c, ldc, stride_c, batch, s);
  }
  void index_select(DType t, const void* x, int64_t outer, int64_t n_src, int64_t inner, const int64_t* idx,
                    int64_t n_idx, void* out, const Stream& s) override {
    on_op("index_select", s, {reads(x), reads(idx), writes(out)});
    k_.index_select(t, x, outer, n_src, inner, idx, n_idx, out, s);
  }
  void index_add(DType t, const void* src, int64_t outer, int64_t n_idx, int64_t inner, const int64_t* idx,
                 int64_t n_dst, void* dst, const Stream& s) override {
    on_op("index_add", s, {reads(src), reads(idx), writes(dst)});
    k_.index_add(t, src, outer, n_idx, inner, idx, n_dst, dst, s);
  }
  void gather(DType t, const void* x, int64_t outer, int64_t n_src, int64_t inner, const int64_t* idx, int64_t n_idx,
              void* out, const Stream& s) override {
    on_op("gather", s, {reads(x), reads(idx), writes(out)});
    k_.gather(t, x, outer, n_src, inner, idx, n_idx, out, s);
  }
  void scatter_add(DType t, const void* src, int64_t outer, int64_t n_idx, int64_t inner, const int64_t* idx,
                   int64_t n_dst, void* dst, const Stream& s) override {
    on_op("scatter_add", s, {reads(src), reads(idx), writes(dst)});
    k_.scatter_add(t, src, outer, n_idx, inner, idx, n_dst, dst, s);
  }
  void one_hot(const int64_t* idx, int64_t n, int64_t classes, DType t, void* out, const Stream& s) override {
    on_op("one_hot", s, {reads(idx), writes(out)});
    k_.one_hot(idx, n, classes, t, out, s);
  }
  void random(DType t, void* out, int64_t n, uint64_t seed, uint64_t offset, RandomSpec spec,
              const Stream& s) override {
    on_op("random", s, {writes(out)});
    k_.random(t, out, n, seed, offset, spec, s);
  }

 private:
  Backend& k_;
};

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
    k_.batch_norm_forward_train(g, x, weight, bias, eps, momentum, running_mean, running_var, y, save_mean,
                                save_invstd, s);
  }
  void batch_norm_forward_eval(const BatchNormGeometry& g, const void* x, const void* weight, const void* bias,
                               const void* running_mean, const void* running_var, double eps, void* y,
                               const Stream& s) override {
    on_op("batch_norm_forward_eval", s,
          {reads(x), reads(weight), reads(bias), reads(running_mean), reads(running_var), writes(y)});
    k_.batch_norm_forward_eval(g, x, weight, bias, running_mean, running_var, eps, y, s);
  }
  void batch_norm_backward(const BatchNormGeometry& g, bool training, const void* x, const void* dy,
                           const void* weight, const void* mean, const void* invstd, void* dx, void* dweight,
                           void* dbias, const Stream& s) override {
    on_op("batch_norm_backward", s,
          {reads(x), reads(dy), reads(weight), reads(mean), reads(invstd), writes(dx), writes(dweight),
           writes(dbias)});
    k_.batch_norm_backward(g, training, x, dy, weight, mean, invstd, dx, dweight, dbias, s);
  }
  void max_pool2d_forward(const Pool2dGeometry& g, const void* x, void* y, int32_t* indices,
                          const Stream& s) override {
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
  void dropout_mask(int64_t n, double p, uint64_t seed, uint64_t offset, uint8_t* mask, const Stream& s) override {
    on_op("dropout_mask", s, {writes(mask)});
    k_.dropout_mask(n, p, seed, offset, mask, s);
  }
  void masked_scale(DType t, const void* x, const uint8_t* mask, double scale, void* y, int64_t n,
                    const Stream& s) override {
    on_op("masked_scale", s, {reads(x), reads(mask), writes(y)});
    k_.masked_scale(t, x, mask, scale, y, n, s);
  }
  void sgd_step(DType t, int64_t count, void* const* params, const void* const* grads,
                void* const* momentum_buffers, const int64_t* numels, const SgdHyper& h,
                const Stream& s) override {
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

std::unique_ptr<Backend> make_checked_backend(Backend& kernels) { return std::make_unique<CheckedBackend>(kernels); }
std::unique_ptr<NNBackend> make_checked_nn_backend(NNBackend& kernels) {
  return std::make_unique<CheckedNNBackend>(kernels);
}

}  // namespace tandem
