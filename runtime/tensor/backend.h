// Backend: the kernel interface each device type implements (kernels/cpu, kernels/cuda), and its registry.
// A kernel sees pointers, shapes, strides and a stream; never a Tensor or the autograd graph.
#pragma once

#include <cstdint>

#include "runtime/base/device.h"
#include "runtime/base/dtype.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/elementwise_table.h"

namespace tandem {

constexpr int kMaxDims = 8;

// Shape and strides (in elements) of a strided operand; broadcast dims have stride 0.
struct StridedDesc {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[kMaxDims] = {};
  int64_t numel() const {
    int64_t n = 1;
    for (int i = 0; i < ndim; ++i) n *= shape[i];
    return n;
  }
  bool is_contiguous() const {
    int64_t expected = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      if (shape[i] != 1 && strides[i] != expected) return false;
      expected *= shape[i];
    }
    return true;
  }
};

// The ops of the table in runtime/tensor/elementwise_table.h.
enum class UnaryOp : uint8_t { TD_UNARY_OPS(TD_OP_NAME) };
// Which operand an op's backward reads (the table's `reads` column): the output y, nothing, or else the input x.
// The front end saves only that one.
enum class UnaryReads : uint8_t { Output, Input, Nothing };
inline UnaryReads unary_backward_reads(UnaryOp op) {
  switch (op) {
#define TD_READS(Name, reads, ...) \
  case UnaryOp::Name: return UnaryReads::reads;
    TD_UNARY_OPS(TD_READS)
#undef TD_READS
  }
  return UnaryReads::Input;
}
inline bool unary_backward_reads_output(UnaryOp op) { return unary_backward_reads(op) == UnaryReads::Output; }
inline bool unary_backward_reads_nothing(UnaryOp op) { return unary_backward_reads(op) == UnaryReads::Nothing; }
struct UnaryParams {
  double a = 0;
  double b = 0;
};

// Comparisons write u8 (0 or 1); the others write the input dtype.
enum class BinaryOp : uint8_t { TD_BINARY_OPS(TD_OP_NAME) TD_COMPARISONS(TD_OP_NAME) };
inline bool is_comparison(BinaryOp op) {
  switch (op) {
#define TD_IS(Name, ...) case BinaryOp::Name:
    TD_COMPARISONS(TD_IS) return true;
#undef TD_IS
    default: return false;
  }
}

enum class ReduceOp : uint8_t { Sum, Max, Min };

struct RandomSpec {
  bool normal = false;  // uniform [a, b) or normal(mean a, std b)
  double a = 0;
  double b = 1;
};

class Backend {
 public:
  virtual ~Backend() = default;

  // dst[i] = value over a strided destination.
  virtual void fill(DType t, void* dst, const StridedDesc& d, double value, const Stream& s) = 0;
  // dst = src (same shape), converting between any two dtypes.
  virtual void copy(DType src_t, const void* src, const StridedDesc& src_d, DType dst_t, void* dst,
                    const StridedDesc& dst_d, const Stream& s) = 0;

  // y = op(x) over n contiguous elements of a float dtype.
  virtual void unary(UnaryOp op, DType t, const void* x, void* y, int64_t n, UnaryParams p, const Stream& s) = 0;
  // gx = gy * op'(x) over n contiguous elements; y = op(x) is given for ops whose derivative uses it.
  virtual void unary_backward(UnaryOp op, DType t, const void* x, const void* y, const void* gy, void* gx, int64_t n,
                              UnaryParams p, const Stream& s) = 0;
  // out = a op b; a and b are described in out's shape (stride 0 where broadcast); out is contiguous.
  virtual void binary(BinaryOp op, DType t, const void* a, const StridedDesc& ad, const void* b, const StridedDesc& bd,
                      void* out, const StridedDesc& od, const Stream& s) = 0;
  // out = cond ? a : b, all described in out's shape; cond is u8; out is contiguous.
  virtual void where(const void* cond, const StridedDesc& cd, DType t, const void* a, const StridedDesc& ad,
                     const void* b, const StridedDesc& bd, void* out, const StridedDesc& od, const Stream& s) = 0;

  // out[o, i] = reduce_r x[o, r, i] of a contiguous [outer, r, inner] tensor (deterministic order).
  // For Max/Min, `indices` (if not null) receives the first position of the extreme value.
  virtual void reduce(ReduceOp op, DType t, const void* x, int64_t outer, int64_t r, int64_t inner, void* out,
                      int64_t* indices, const Stream& s) = 0;
  // (log-)softmax over the middle dim of a contiguous [outer, n, inner] tensor, and its backward.
  virtual void softmax(bool log, DType t, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                       const Stream& s) = 0;
  virtual void softmax_backward(bool log, DType t, const void* y, const void* gy, void* gx, int64_t outer, int64_t n,
                                int64_t inner, const Stream& s) = 0;

  // Row-major batched GEMM: C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b], op = transpose if asked.
  // op(A) is m x k, op(B) is k x n; lda/ldb/ldc are row strides; stride_* step between batch items.
  virtual void gemm(DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,
                    int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, double beta, void* c,
                    int64_t ldc, int64_t stride_c, int64_t batch, const Stream& s) = 0;

  // Indexing along the middle dim of contiguous [outer, n, inner] tensors; idx is i64.
  // index_select: out[o, j, i] = x[o, idx[j], i].
  virtual void index_select(DType t, const void* x, int64_t outer, int64_t n_src, int64_t inner, const int64_t* idx,
                            int64_t n_idx, void* out, const Stream& s) = 0;
  // index_add: dst[o, idx[j], i] += src[o, j, i] (deterministic: in increasing j).
  virtual void index_add(DType t, const void* src, int64_t outer, int64_t n_idx, int64_t inner, const int64_t* idx,
                         int64_t n_dst, void* dst, const Stream& s) = 0;
  // gather: out[o, j, i] = x[o, idx[o, j, i], i].
  virtual void gather(DType t, const void* x, int64_t outer, int64_t n_src, int64_t inner, const int64_t* idx,
                      int64_t n_idx, void* out, const Stream& s) = 0;
  // scatter_add: dst[o, idx[o, j, i], i] += src[o, j, i] (deterministic: in increasing j).
  virtual void scatter_add(DType t, const void* src, int64_t outer, int64_t n_idx, int64_t inner, const int64_t* idx,
                           int64_t n_dst, void* dst, const Stream& s) = 0;
  // out[j, c] = (idx[j] == c) for n indices and `classes` classes.
  virtual void one_hot(const int64_t* idx, int64_t n, int64_t classes, DType t, void* out, const Stream& s) = 0;

  // n values from the Philox stream (seed, offset): identical on every backend.
  virtual void random(DType t, void* out, int64_t n, uint64_t seed, uint64_t offset, RandomSpec spec,
                      const Stream& s) = 0;
};

// Called by each backend library at static-initialization time.
void register_backend(DeviceType type, Backend* backend);
// The backend for `device`; throws DeviceError when it is missing or the device is absent.
Backend& backend_for(Device device);

}  // namespace tandem
