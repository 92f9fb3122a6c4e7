// Dense layouts: density and layout equality of strided tensors, memory orders, and the layout-conversion count.
#include "runtime/tensor/layout.h"

#include <algorithm>
#include <atomic>
#include <numeric>

#include "runtime/tensor/autograd.h"

namespace tandem {

namespace {
std::atomic<int64_t> g_layout_conversions{0};
}  // namespace

bool is_dense(const Shape& shape, const Shape& strides) {
  std::vector<size_t> dims;
  for (size_t i = 0; i < shape.size(); ++i) {
    if (shape[i] == 0) return false;
    if (shape[i] != 1) dims.push_back(i);
  }
  std::sort(dims.begin(), dims.end(), [&](size_t a, size_t b) { return strides[a] < strides[b]; });
  int64_t expected = 1;
  for (size_t d : dims) {
    if (strides[d] != expected) return false;
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

std::vector<int> memory_order(const Tensor& t) {
  std::vector<int> order(static_cast<size_t>(t.dim()));
  std::iota(order.begin(), order.end(), 0);
  const Shape& st = t.strides();
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return st[a] > st[b]; });
  return order;
}

StridedDesc permute_desc(const StridedDesc& d, const std::vector<int>& order) {
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
