// Backend: the kernel interface each device type implements (kernels/cpu, kernels/cuda), and its registry.
// A kernel sees pointers, shapes, strides and a stream; never a Tensor or the autograd graph.
#pragma once

#include <cstdint>

#include "runtime/base/device.h"
#include "runtime/base/dtype.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/elementwise_table.h"
#include "runtime/tensor/kernel_args.h"

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
  // Elements from the first to the last (strides are never negative); 0 when empty.
  int64_t span() const {
    int64_t last = 0;
    for (int i = 0; i < ndim; ++i) {
      if (shape[i] == 0) return 0;
      last += (shape[i] - 1) * strides[i];
    }
    return last + 1;
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

// The elements a row-major batched matrix spans: `batch` matrices of rows x cols, rows `ld` and matrices `stride`
// elements apart.
inline int64_t matrix_span(int64_t batch, int64_t stride, int64_t rows, int64_t cols, int64_t ld) {
  if (batch <= 0 || rows <= 0 || cols <= 0) return 0;
  return (batch - 1) * stride + (rows - 1) * ld + cols;
}

// One struct per kernel method: its arguments, and in operands(f) each pointer operand with what the kernel does
// to it (f is called with an Operand; see kernel_args.h). The struct is the method's one declaration: the list
// TD_BACKEND_METHODS below makes the interface, the backends' overrides and the wrappers that watch every call.

// dst[i] = value over a strided destination.
struct FillArgs {
  DType t;
  void* dst;
  StridedDesc d;
  double value;
  template <class F>
  void operands(F&& f) const {
    f(Operand::write("dst", dst, t, d.span()));
  }
};

// dst = src (same shape), converting between any two dtypes.
struct CopyArgs {
  DType src_t;
  const void* src;
  StridedDesc src_d;
  DType dst_t;
  void* dst;
  StridedDesc dst_d;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("src", src, src_t, src_d.span()));
    f(Operand::write("dst", dst, dst_t, dst_d.span()));
  }
};

// y = op(x) over n contiguous elements of a float dtype.
struct UnaryArgs {
  UnaryOp op;
  DType t;
  const void* x;
  void* y;
  int64_t n;
  UnaryParams p;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, t, n));
    f(Operand::write("y", y, t, n));
  }
};

// gx = gy * op'(x) over n contiguous elements; y = op(x) is given for ops whose derivative uses it (x or y may be
// null when the op's derivative does not use it).
struct UnaryBackwardArgs {
  UnaryOp op;
  DType t;
  const void* x;
  const void* y;
  const void* gy;
  void* gx;
  int64_t n;
  UnaryParams p;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, t, n));
    f(Operand::read("y", y, t, n));
    f(Operand::read("gy", gy, t, n));
    f(Operand::write("gx", gx, t, n));
  }
};

// out = a op b; a and b are described in out's shape (stride 0 where broadcast); out is contiguous.
struct BinaryArgs {
  BinaryOp op;
  DType t;
  const void* a;
  StridedDesc ad;
  const void* b;
  StridedDesc bd;
  void* out;
  StridedDesc od;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("a", a, t, ad.span()));
    f(Operand::read("b", b, t, bd.span()));
    f(Operand::write("out", out, is_comparison(op) ? DType::U8 : t, od.span()));
  }
};

// out = cond ? a : b, all described in out's shape; cond is u8; out is contiguous.
struct WhereArgs {
  const void* cond;
  StridedDesc cd;
  DType t;
  const void* a;
  StridedDesc ad;
  const void* b;
  StridedDesc bd;
  void* out;
  StridedDesc od;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("cond", cond, DType::U8, cd.span()));
    f(Operand::read("a", a, t, ad.span()));
    f(Operand::read("b", b, t, bd.span()));
    f(Operand::write("out", out, t, od.span()));
  }
};

// out[o, i] = reduce_r x[o, r, i] of a contiguous [outer, r, inner] tensor (deterministic order).
// For Max/Min, `indices` (if not null) receives the first position of the extreme value.
struct ReduceArgs {
  ReduceOp op;
  DType t;
  const void* x;
  int64_t outer, r, inner;
  void* out;
  int64_t* indices;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, t, outer * r * inner));
    f(Operand::write("out", out, t, outer * inner));
    f(Operand::write("indices", indices, DType::I64, outer * inner));
  }
};

// (log-)softmax over the middle dim of a contiguous [outer, n, inner] tensor, and its backward.
struct SoftmaxArgs {
  bool log;
  DType t;
  const void* x;
  void* y;
  int64_t outer, n, inner;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, t, outer * n * inner));
    f(Operand::write("y", y, t, outer * n * inner));
  }
};
struct SoftmaxBackwardArgs {
  bool log;
  DType t;
  const void* y;
  const void* gy;
  void* gx;
  int64_t outer, n, inner;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("y", y, t, outer * n * inner));
    f(Operand::read("gy", gy, t, outer * n * inner));
    f(Operand::write("gx", gx, t, outer * n * inner));
  }
};

// Row-major batched GEMM: C[b] = alpha * op(A[b]) * op(B[b]) + beta * C[b], op = transpose if asked.
// op(A) is m x k, op(B) is k x n; lda/ldb/ldc are row strides; stride_* step between batch items.
struct GemmArgs {
  DType t;
  bool trans_a, trans_b;
  int64_t m, n, k;
  double alpha;
  const void* a;
  int64_t lda, stride_a;
  const void* b;
  int64_t ldb, stride_b;
  double beta;
  void* c;
  int64_t ldc, stride_c;
  int64_t batch;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("a", a, t,
                    trans_a ? matrix_span(batch, stride_a, k, m, lda) : matrix_span(batch, stride_a, m, k, lda)));
    f(Operand::read("b", b, t,
                    trans_b ? matrix_span(batch, stride_b, n, k, ldb) : matrix_span(batch, stride_b, k, n, ldb)));
    const int64_t c_span = matrix_span(batch, stride_c, m, n, ldc);
    f(beta == 0 ? Operand::write("c", c, t, c_span) : Operand::update("c", c, t, c_span));
  }
};

// Indexing along the middle dim of contiguous [outer, n, inner] tensors; idx is i64: n_idx indices into the rows
// (index_select, index_add) or one per element (gather, scatter_add: kPerElement).
// index_select: out[o, j, i] = x[o, idx[j], i]; gather: out[o, j, i] = x[o, idx[o, j, i], i].
template <bool kPerElement>
struct IndexReadArgs {
  DType t;
  const void* x;
  int64_t outer, n_src, inner;
  const int64_t* idx;
  int64_t n_idx;
  void* out;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("x", x, t, outer * n_src * inner));
    f(Operand::read("idx", idx, DType::I64, kPerElement ? outer * n_idx * inner : n_idx));
    f(Operand::write("out", out, t, outer * n_idx * inner));
  }
};
using IndexSelectArgs = IndexReadArgs<false>;
using GatherArgs = IndexReadArgs<true>;
// index_add: dst[o, idx[j], i] += src[o, j, i]; scatter_add: dst[o, idx[o, j, i], i] += src[o, j, i]
// (deterministic: in increasing j).
template <bool kPerElement>
struct IndexAccumulateArgs {
  DType t;
  const void* src;
  int64_t outer, n_idx, inner;
  const int64_t* idx;
  int64_t n_dst;
  void* dst;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("src", src, t, outer * n_idx * inner));
    f(Operand::read("idx", idx, DType::I64, kPerElement ? outer * n_idx * inner : n_idx));
    f(Operand::update("dst", dst, t, outer * n_dst * inner));
  }
};
using IndexAddArgs = IndexAccumulateArgs<false>;
using ScatterAddArgs = IndexAccumulateArgs<true>;
// out[j, c] = (idx[j] == c) for n indices and `classes` classes.
struct OneHotArgs {
  const int64_t* idx;
  int64_t n, classes;
  DType t;
  void* out;
  template <class F>
  void operands(F&& f) const {
    f(Operand::read("idx", idx, DType::I64, n));
    f(Operand::write("out", out, t, n * classes));
  }
};

// n values from the Philox stream (seed, offset): identical on every backend.
struct RandomArgs {
  DType t;
  void* out;
  int64_t n;
  uint64_t seed, offset;
  RandomSpec spec;
  template <class F>
  void operands(F&& f) const {
    f(Operand::write("out", out, t, n));
  }
};

// X(method, Args) for every Backend method.
#define TD_BACKEND_METHODS(X)              \
  X(fill, FillArgs)                        \
  X(copy, CopyArgs)                        \
  X(unary, UnaryArgs)                      \
  X(unary_backward, UnaryBackwardArgs)     \
  X(binary, BinaryArgs)                    \
  X(where, WhereArgs)                      \
  X(reduce, ReduceArgs)                    \
  X(softmax, SoftmaxArgs)                  \
  X(softmax_backward, SoftmaxBackwardArgs) \
  X(gemm, GemmArgs)                        \
  X(index_select, IndexSelectArgs)         \
  X(index_add, IndexAddArgs)               \
  X(gather, GatherArgs)                    \
  X(scatter_add, ScatterAddArgs)           \
  X(one_hot, OneHotArgs)                   \
  X(random, RandomArgs)

class Backend {
 public:
  virtual ~Backend() = default;
  TD_BACKEND_METHODS(TD_KERNEL_PURE_VIRTUAL)
};

// The declarations of every Backend method, for the class body of a backend that implements them all.
#define TANDEM_BACKEND_OVERRIDES TD_BACKEND_METHODS(TD_KERNEL_OVERRIDE)

// Called by each backend library at static-initialization time.
void register_backend(DeviceType type, Backend* backend);
// The kernels registered for `type` (null: none), e.g. for a test to register a wrapper of them in their place.
Backend* registered_backend(DeviceType type);
// The backend for `device`; throws DeviceError when it is missing or the device is absent.
Backend& backend_for(Device device);

}  // namespace tandem
