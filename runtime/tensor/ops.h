// The op front end: differentiable tensor ops that models call. Each dispatches to the backend of its
// inputs' device and records its backward when an input requires grad.
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace tandem {

// Elementwise arithmetic with broadcasting (NumPy rules). Inputs must share device and dtype.
Tensor add(const Tensor& a, const Tensor& b);
Tensor sub(const Tensor& a, const Tensor& b);
Tensor mul(const Tensor& a, const Tensor& b);
Tensor div(const Tensor& a, const Tensor& b);
Tensor maximum(const Tensor& a, const Tensor& b);
Tensor minimum(const Tensor& a, const Tensor& b);
Tensor add(const Tensor& a, double b);
Tensor sub(const Tensor& a, double b);
Tensor mul(const Tensor& a, double b);
Tensor div(const Tensor& a, double b);
Tensor rsub(double a, const Tensor& b);  // a - b
Tensor rdiv(double a, const Tensor& b);  // a / b

// Comparisons (no gradient): u8 tensors of 0/1.
Tensor eq(const Tensor& a, const Tensor& b);
Tensor ne(const Tensor& a, const Tensor& b);
Tensor lt(const Tensor& a, const Tensor& b);
Tensor le(const Tensor& a, const Tensor& b);
Tensor gt(const Tensor& a, const Tensor& b);
Tensor ge(const Tensor& a, const Tensor& b);

// Elementwise functions.
Tensor neg(const Tensor& x);
Tensor exp(const Tensor& x);
Tensor log(const Tensor& x);
Tensor sqrt(const Tensor& x);
Tensor abs(const Tensor& x);
Tensor pow(const Tensor& x, double exponent);
Tensor relu(const Tensor& x);
Tensor relu6(const Tensor& x);
Tensor sigmoid(const Tensor& x);
Tensor tanh(const Tensor& x);
Tensor clamp(const Tensor& x, double lo, double hi);

// Selection.
Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b);  // cond: u8, broadcast
Tensor masked_fill(const Tensor& x, const Tensor& mask, double value);

// Reductions. Dims may be negative; an empty dim list means all dims.
Tensor sum(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor mean(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
Tensor amax(const Tensor& x, const std::vector<int64_t>& dims = {}, bool keepdim = false);
struct MaxResult {
  Tensor values;
  Tensor indices;  // i64
};
MaxResult max(const Tensor& x, int64_t dim, bool keepdim = false);
Tensor argmax(const Tensor& x, int64_t dim, bool keepdim = false);
// Sums a broadcast gradient back to `shape`.
Tensor sum_to(const Tensor& x, const Shape& shape);

Tensor softmax(const Tensor& x, int64_t dim);
Tensor log_softmax(const Tensor& x, int64_t dim);

// Linear algebra. matmul: [..., m, k] @ [k, n], or [b, m, k] @ [b, k, n], or 2-D @ 2-D.
Tensor matmul(const Tensor& a, const Tensor& b);
// x [..., in] · weight [out, in]^T + bias [out].
Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias = Tensor());

// Joining and splitting along a dim.
Tensor concat(const std::vector<Tensor>& tensors, int64_t dim);
std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim);
std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim);  // equal pieces, the last may be smaller
std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim);

// Indexing with i64 indices.
Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index);           // index: 1-D
Tensor gather(const Tensor& x, int64_t dim, const Tensor& index);                 // index: same rank as x
Tensor one_hot(const Tensor& labels, int64_t classes, DType dtype = DType::F32);  // labels: i64

// In-place (no autograd history; refused on tensors that are part of a graph while grad mode is on).
Tensor& add_(Tensor& x, const Tensor& y, double alpha = 1.0);  // x += alpha * y
Tensor& mul_(Tensor& x, double value);

inline Tensor operator+(const Tensor& a, const Tensor& b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, const Tensor& b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, const Tensor& b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, const Tensor& b) { return div(a, b); }
inline Tensor operator+(const Tensor& a, double b) { return add(a, b); }
inline Tensor operator-(const Tensor& a, double b) { return sub(a, b); }
inline Tensor operator*(const Tensor& a, double b) { return mul(a, b); }
inline Tensor operator/(const Tensor& a, double b) { return div(a, b); }
inline Tensor operator+(double a, const Tensor& b) { return add(b, a); }
inline Tensor operator-(double a, const Tensor& b) { return rsub(a, b); }
inline Tensor operator*(double a, const Tensor& b) { return mul(b, a); }
inline Tensor operator/(double a, const Tensor& b) { return rdiv(a, b); }
inline Tensor operator-(const Tensor& x) { return neg(x); }

}  // namespace tandem
