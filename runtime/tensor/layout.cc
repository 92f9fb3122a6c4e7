// Dense layouts: density and layout equality of strided tensors, memory orders, and the layout-conversion count.
#include "runtime/tensor/layout.h"

#include <algorithm>
#include <atomic>
#include <numeric>

#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"

namespace tandem {

namespace {
std::atomic<int64_t> g_layout_conversions{0};
}  // namespace

// Without allocating: walk the dims of size > 1 from the innermost, each one's stride the product of the sizes
// inside it. A dim can match only once, since the expected stride grows with each match.
bool is_dense(const Shape& shape, const Shape& strides) {
  size_t remaining = 0;
  for (int64_t s : shape) {
    if (s == 0) return false;
    if (s != 1) ++remaining;
  }
  int64_t expected = 1;
  for (; remaining > 0; --remaining) {
    size_t d = 0;
    while (d < shape.size() && (shape[d] == 1 || strides[d] != expected)) ++d;
    if (d == shape.size()) return false;
    expected *= shape[d];
  }
  return true;
}

bool is_dense(const Tensor& t) { return is_dense(t.shape(), t.strides()); }

bool same_layout(const Tensor& a, const Tensor& b) {
  if (a.shape() != b.shape() || !is_dense(a) || !is_dense(b)) return false;
  for (int64_t i = 0; i < a.dim(); ++i)
    if (a.shape()[i] != 1 && a.strides()[i] != b.strides()[i]) return false;
  return true;
}

Tensor in_layout_of(const Tensor& t, const Tensor& ref) {
  if (same_layout(t, ref)) return t;
  autograd::NoGradGuard ng;
  Tensor out = empty_like(ref, t.options());
  out.copy_(t);
  return out;
}

DimOrder memory_order(const Tensor& t) {
  TD_CHECK(t.dim() <= kMaxDims, "memory_order: ", t.dim(), " dims, at most ", kMaxDims, " supported");
  DimOrder order;
  order.size = static_cast<int>(t.dim());
  std::iota(order.dims, order.dims + order.size, 0);
  const Shape& st = t.strides();
  std::stable_sort(order.dims, order.dims + order.size, [&](int a, int b) { return st[a] > st[b]; });
  return order;
}

StridedDesc permute_desc(const StridedDesc& d, const DimOrder& order) {
  StridedDesc out;
  out.ndim = d.ndim;
  for (int i = 0; i < d.ndim; ++i) {
    out.shape[i] = d.shape[order[i]];
    out.strides[i] = d.strides[order[i]];
  }
  return out;
}

int64_t layout_conversion_count() { return g_layout_conversions.load(); }
void count_layout_conversion() { g_layout_conversions.fetch_add(1); }

}  // namespace tandem
