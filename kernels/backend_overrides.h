// TANDEM_BACKEND_OVERRIDES: the declarations of every Backend method, for the class body of a backend that
// implements them all (kernels/cpu, kernels/cuda), so the list follows runtime/tensor/backend.h in one place.
#pragma once

#include "runtime/tensor/backend.h"

#define TANDEM_BACKEND_OVERRIDES                                                                                      \
  void fill(DType t, void* dst, const StridedDesc& d, double value, const Stream& s) override;                        \
  void copy(DType src_t, const void* src, const StridedDesc& src_d, DType dst_t, void* dst, const StridedDesc& dst_d, \
            const Stream& s) override;                                                                                \
  void unary(UnaryOp op, DType t, const void* x, void* y, int64_t n, UnaryParams p, const Stream& s) override;        \
  void unary_backward(UnaryOp op, DType t, const void* x, const void* y, const void* gy, void* gx, int64_t n,         \
                      UnaryParams p, const Stream& s) override;                                                       \
  void binary(BinaryOp op, DType t, const void* a, const StridedDesc& ad, const void* b, const StridedDesc& bd,       \
              void* out, const StridedDesc& od, const Stream& s) override;                                            \
  void where(const void* cond, const StridedDesc& cd, DType t, const void* a, const StridedDesc& ad, const void* b,   \
             const StridedDesc& bd, void* out, const StridedDesc& od, const Stream& s) override;                      \
  void reduce(ReduceOp op, DType t, const void* x, int64_t outer, int64_t r, int64_t inner, void* out,                \
              int64_t* indices, const Stream& s) override;                                                            \
  void softmax(bool log, DType t, const void* x, void* y, int64_t outer, int64_t n, int64_t inner, const Stream& s)   \
      override;                                                                                                       \
  void softmax_backward(bool log, DType t, const void* y, const void* gy, void* gx, int64_t outer, int64_t n,         \
                        int64_t inner, const Stream& s) override;                                                     \
  void gemm(DType t, bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, double alpha, const void* a,        \
            int64_t lda, int64_t stride_a, const void* b, int64_t ldb, int64_t stride_b, double beta, void* c,        \
            int64_t ldc, int64_t stride_c, int64_t batch, const Stream& s) override;                                  \
  void index_select(DType t, const void* x, int64_t outer, int64_t n_src, int64_t inner, const int64_t* idx,          \
                    int64_t n_idx, void* out, const Stream& s) override;                                              \
  void index_add(DType t, const void* src, int64_t outer, int64_t n_idx, int64_t inner, const int64_t* idx,           \
                 int64_t n_dst, void* dst, const Stream& s) override;                                                 \
  void gather(DType t, const void* x, int64_t outer, int64_t n_src, int64_t inner, const int64_t* idx, int64_t n_idx, \
              void* out, const Stream& s) override;                                                                   \
  void scatter_add(DType t, const void* src, int64_t outer, int64_t n_idx, int64_t inner, const int64_t* idx,         \
                   int64_t n_dst, void* dst, const Stream& s) override;                                               \
  void one_hot(const int64_t* idx, int64_t n, int64_t classes, DType t, void* out, const Stream& s) override;         \
  void random(DType t, void* out, int64_t n, uint64_t seed, uint64_t offset, RandomSpec spec, const Stream& s) override;
