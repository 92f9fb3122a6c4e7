// Double-precision reference ops on host arrays (plain loops), independent of the runtime's kernels.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

#include "runtime/base/dtype.h"

namespace tandem {
namespace ref {

using Shape = std::vector<int64_t>;
using Index = std::vector<int64_t>;

// A row-major array of doubles. `dtype`, when set, is the dtype the op under test must produce
// (unset: the case's floating dtype).
struct HostTensor {
  Shape shape;
  std::vector<double> v;
  std::optional<DType> dtype;

  HostTensor() = default;
  HostTensor(Shape s, std::vector<double> values, std::optional<DType> d = std::nullopt)
      : shape(std::move(s)), v(std::move(values)), dtype(d) {}
  explicit HostTensor(Shape s) : shape(std::move(s)), v(static_cast<size_t>(numel_of(shape)), 0.0) {}
  static int64_t numel_of(const Shape& s);
  int64_t numel() const { return static_cast<int64_t>(v.size()); }
  int64_t dim() const { return static_cast<int64_t>(shape.size()); }
  double& at(const Index& i);
  double at(const Index& i) const;
};

int64_t wrap(int64_t dim, int64_t ndim);
// Multi-index of flat position `flat` in row-major `shape`.
Index unravel(int64_t flat, const Shape& shape);
int64_t ravel(const Index& idx, const Shape& shape);
// NumPy broadcast of two shapes (the caller passes compatible shapes).
Shape broadcast(const Shape& a, const Shape& b);
// Element of `x` seen at index `idx` of the broadcast shape `out`.
double broadcast_at(const HostTensor& x, const Index& idx, const Shape& out);

HostTensor map(const HostTensor& x, const std::function<double(double)>& f);
HostTensor zip(const HostTensor& a, const HostTensor& b, const std::function<double(double, double)>& f);
HostTensor select_where(const HostTensor& cond, const HostTensor& a, const HostTensor& b);
HostTensor broadcast_to(const HostTensor& x, const Shape& shape);

// Reduction over `dims` (empty: all) with `f(acc, v)` from `init`.
HostTensor reduce(const HostTensor& x, const std::vector<int64_t>& dims, bool keepdim, double init,
                  const std::function<double(double, double)>& f);
// Values and first positions of the maximum along one dim.
std::vector<HostTensor> max_along(const HostTensor& x, int64_t dim, bool keepdim);
HostTensor sum_to(const HostTensor& x, const Shape& shape);
HostTensor softmax(const HostTensor& x, int64_t dim, bool log);

// [.., m, k] @ [k, n], or [b, m, k] @ [b, k, n].
HostTensor matmul(const HostTensor& a, const HostTensor& b);
HostTensor permute(const HostTensor& x, const std::vector<int64_t>& perm);
HostTensor transpose(const HostTensor& x, int64_t d0, int64_t d1);
HostTensor reshape(const HostTensor& x, const Shape& shape);
// Python-style slice with clamping; step > 0.
HostTensor slice(const HostTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step);

HostTensor concat(const std::vector<HostTensor>& xs, int64_t dim);
std::vector<HostTensor> split(const HostTensor& x, const std::vector<int64_t>& sizes, int64_t dim);
HostTensor index_select(const HostTensor& x, int64_t dim, const HostTensor& index);
HostTensor gather(const HostTensor& x, int64_t dim, const HostTensor& index);
HostTensor one_hot(const HostTensor& labels, int64_t classes);

}  // namespace ref
}  // namespace tandem
