// Backend wrapper that reports every kernel's operands to the stream checker. Operands count as their whole
// storage: kernels of two streams on disjoint parts of one storage would be reported (none exist).
#include "runtime/tensor/checked_backend.h"

#include "runtime/memory/stream_check.h"

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
  void copy(DType src_t, const void* src, const StridedDesc& src_d, DType dst_t, void* dst, const StridedDesc& dst_d,
            const Stream& s) override {
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
  void reduce(ReduceOp op, DType t, const void* x, int64_t outer, int64_t r, int64_t inner, void* out, int64_t* indices,
              const Stream& s) override {
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

}  // namespace

std::unique_ptr<Backend> make_checked_backend(Backend& kernels) { return std::make_unique<CheckedBackend>(kernels); }

}  // namespace tandem
