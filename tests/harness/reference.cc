// Double-precision reference ops: every output element computed by a direct loop over indices.
#include "tests/harness/reference.h"

#include <cmath>
#include <limits>

namespace tandem {
namespace ref {

int64_t HostTensor::numel_of(const Shape& s) {
  int64_t n = 1;
  for (int64_t d : s) n *= d;
  return n;
}

double& HostTensor::at(const Index& i) { return v[static_cast<size_t>(ravel(i, shape))]; }
double HostTensor::at(const Index& i) const { return v[static_cast<size_t>(ravel(i, shape))]; }

int64_t wrap(int64_t dim, int64_t ndim) { return dim < 0 ? dim + ndim : dim; }

Index unravel(int64_t flat, const Shape& shape) {
  Index idx(shape.size());
  for (int64_t d = static_cast<int64_t>(shape.size()) - 1; d >= 0; --d) {
    idx[d] = flat % shape[d];
    flat /= shape[d];
  }
  return idx;
}

int64_t ravel(const Index& idx, const Shape& shape) {
  int64_t flat = 0;
  for (size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
  return flat;
}

Shape broadcast(const Shape& a, const Shape& b) {
  size_t n = std::max(a.size(), b.size());
  Shape out(n);
  for (size_t i = 0; i < n; ++i) {
    int64_t da = i + a.size() < n ? 1 : a[i + a.size() - n];
    int64_t db = i + b.size() < n ? 1 : b[i + b.size() - n];
    out[i] = da == 1 ? db : da;
  }
  return out;
}

double broadcast_at(const HostTensor& x, const Index& idx, const Shape& out) {
  size_t lead = out.size() - x.shape.size();
  Index own(x.shape.size());
  for (size_t d = 0; d < x.shape.size(); ++d) own[d] = x.shape[d] == 1 ? 0 : idx[d + lead];
  return x.at(own);
}

HostTensor map(const HostTensor& x, const std::function<double(double)>& f) {
  HostTensor y(x.shape);
  for (int64_t i = 0; i < x.numel(); ++i) y.v[i] = f(x.v[i]);
  return y;
}

HostTensor zip(const HostTensor& a, const HostTensor& b, const std::function<double(double, double)>& f) {
  HostTensor y(broadcast(a.shape, b.shape));
  for (int64_t i = 0; i < y.numel(); ++i) {
    Index idx = unravel(i, y.shape);
    y.v[i] = f(broadcast_at(a, idx, y.shape), broadcast_at(b, idx, y.shape));
  }
  return y;
}

HostTensor select_where(const HostTensor& cond, const HostTensor& a, const HostTensor& b) {
  HostTensor y(broadcast(broadcast(cond.shape, a.shape), b.shape));
  for (int64_t i = 0; i < y.numel(); ++i) {
    Index idx = unravel(i, y.shape);
    y.v[i] = broadcast_at(cond, idx, y.shape) != 0 ? broadcast_at(a, idx, y.shape) : broadcast_at(b, idx, y.shape);
  }
  return y;
}

HostTensor broadcast_to(const HostTensor& x, const Shape& shape) {
  HostTensor y(shape);
  for (int64_t i = 0; i < y.numel(); ++i) y.v[i] = broadcast_at(x, unravel(i, shape), shape);
  return y;
}

namespace {
std::vector<bool> reduced_mask(const HostTensor& x, const std::vector<int64_t>& dims) {
  std::vector<bool> red(x.shape.size(), dims.empty());
  for (int64_t d : dims) red[wrap(d, x.dim())] = true;
  return red;
}
}  // namespace

HostTensor reduce(const HostTensor& x, const std::vector<int64_t>& dims, bool keepdim, double init,
                  const std::function<double(double, double)>& f) {
  std::vector<bool> red = reduced_mask(x, dims);
  Shape keep = x.shape;
  for (size_t d = 0; d < keep.size(); ++d)
    if (red[d]) keep[d] = 1;
  HostTensor acc(keep);
  for (double& a : acc.v) a = init;
  for (int64_t i = 0; i < x.numel(); ++i) {
    Index idx = unravel(i, x.shape);
    for (size_t d = 0; d < idx.size(); ++d)
      if (red[d]) idx[d] = 0;
    double& a = acc.at(idx);
    a = f(a, x.v[i]);
  }
  if (keepdim) return acc;
  Shape out;
  for (size_t d = 0; d < keep.size(); ++d)
    if (!red[d]) out.push_back(keep[d]);
  return HostTensor(out, acc.v);
}

std::vector<HostTensor> max_along(const HostTensor& x, int64_t dim, bool keepdim) {
  dim = wrap(dim, x.dim());
  Shape keep = x.shape;
  keep[dim] = 1;
  HostTensor values(keep), positions(keep);
  for (int64_t o = 0; o < values.numel(); ++o) {
    Index idx = unravel(o, keep);
    double best = -std::numeric_limits<double>::infinity();
    int64_t arg = 0;
    for (int64_t j = 0; j < x.shape[dim]; ++j) {
      idx[dim] = j;
      if (x.at(idx) > best) {
        best = x.at(idx);
        arg = j;
      }
    }
    values.v[o] = best;
    positions.v[o] = static_cast<double>(arg);
  }
  if (!keepdim) {
    Shape s = x.shape;
    s.erase(s.begin() + dim);
    values.shape = positions.shape = s;
  }
  positions.dtype = DType::I64;
  return {values, positions};
}

HostTensor sum_to(const HostTensor& x, const Shape& shape) {
  HostTensor y(shape);
  size_t lead = x.shape.size() - shape.size();
  for (int64_t i = 0; i < x.numel(); ++i) {
    Index idx = unravel(i, x.shape);
    Index own(shape.size());
    for (size_t d = 0; d < shape.size(); ++d) own[d] = shape[d] == 1 ? 0 : idx[d + lead];
    y.at(own) += x.v[i];
  }
  return y;
}

HostTensor softmax(const HostTensor& x, int64_t dim, bool log) {
  dim = wrap(dim, x.dim());
  HostTensor y(x.shape);
  for (int64_t i = 0; i < x.numel(); ++i) {
    Index idx = unravel(i, x.shape);
    double denom = 0;
    Index k = idx;
    for (int64_t j = 0; j < x.shape[dim]; ++j) {
      k[dim] = j;
      denom += std::exp(x.at(k));
    }
    y.v[i] = log ? x.v[i] - std::log(denom) : std::exp(x.v[i]) / denom;
  }
  return y;
}

HostTensor matmul(const HostTensor& a, const HostTensor& b) {
  int64_t m = a.shape[a.dim() - 2], k = a.shape.back(), n = b.shape.back();
  bool batched = b.dim() == 3;
  int64_t batch = batched ? a.shape[0] : a.numel() / (m * k);
  Shape out = a.shape;
  out.back() = n;
  HostTensor y(out);
  for (int64_t p = 0; p < batch; ++p)
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < k; ++q) s += a.v[(p * m + i) * k + q] * b.v[(batched ? p * k * n : 0) + q * n + j];
        y.v[(p * m + i) * n + j] = s;
      }
  return y;
}

HostTensor permute(const HostTensor& x, const std::vector<int64_t>& perm) {
  Shape s(perm.size());
  for (size_t d = 0; d < perm.size(); ++d) s[d] = x.shape[wrap(perm[d], x.dim())];
  HostTensor y(s);
  for (int64_t i = 0; i < y.numel(); ++i) {
    Index out = unravel(i, s), in(out.size());
    for (size_t d = 0; d < perm.size(); ++d) in[wrap(perm[d], x.dim())] = out[d];
    y.v[i] = x.at(in);
  }
  return y;
}

HostTensor transpose(const HostTensor& x, int64_t d0, int64_t d1) {
  std::vector<int64_t> perm(x.shape.size());
  for (size_t d = 0; d < perm.size(); ++d) perm[d] = static_cast<int64_t>(d);
  std::swap(perm[wrap(d0, x.dim())], perm[wrap(d1, x.dim())]);
  return permute(x, perm);
}

HostTensor reshape(const HostTensor& x, const Shape& shape) { return HostTensor(shape, x.v); }

HostTensor slice(const HostTensor& x, int64_t dim, int64_t start, int64_t end, int64_t step) {
  dim = wrap(dim, x.dim());
  int64_t n = x.shape[dim];
  if (start < 0) start += n;
  if (end < 0) end += n;
  start = std::min(std::max<int64_t>(start, 0), n);
  end = std::min(std::max(end, start), n);
  Shape s = x.shape;
  s[dim] = 0;
  for (int64_t j = start; j < end; j += step) ++s[dim];
  HostTensor y(s);
  for (int64_t i = 0; i < y.numel(); ++i) {
    Index idx = unravel(i, s);
    idx[dim] = start + idx[dim] * step;
    y.v[i] = x.at(idx);
  }
  return y;
}

HostTensor concat(const std::vector<HostTensor>& xs, int64_t dim) {
  dim = wrap(dim, xs[0].dim());
  Shape s = xs[0].shape;
  s[dim] = 0;
  for (const HostTensor& x : xs) s[dim] += x.shape[dim];
  HostTensor y(s);
  for (int64_t i = 0; i < y.numel(); ++i) {
    Index idx = unravel(i, s);
    size_t part = 0;
    while (idx[dim] >= xs[part].shape[dim]) idx[dim] -= xs[part++].shape[dim];
    y.v[i] = xs[part].at(idx);
  }
  return y;
}

std::vector<HostTensor> split(const HostTensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  std::vector<HostTensor> parts;
  int64_t offset = 0;
  for (int64_t s : sizes) {
    parts.push_back(slice(x, dim, offset, offset + s, 1));
    offset += s;
  }
  return parts;
}

HostTensor index_select(const HostTensor& x, int64_t dim, const HostTensor& index) {
  dim = wrap(dim, x.dim());
  Shape s = x.shape;
  s[dim] = index.numel();
  HostTensor y(s);
  for (int64_t i = 0; i < y.numel(); ++i) {
    Index idx = unravel(i, s);
    idx[dim] = static_cast<int64_t>(index.v[idx[dim]]);
    y.v[i] = x.at(idx);
  }
  return y;
}

HostTensor gather(const HostTensor& x, int64_t dim, const HostTensor& index) {
  dim = wrap(dim, x.dim());
  HostTensor y(index.shape);
  for (int64_t i = 0; i < y.numel(); ++i) {
    Index idx = unravel(i, index.shape);
    idx[dim] = static_cast<int64_t>(index.v[i]);
    y.v[i] = x.at(idx);
  }
  return y;
}

HostTensor one_hot(const HostTensor& labels, int64_t classes) {
  Shape s = labels.shape;
  s.push_back(classes);
  HostTensor y(s);
  for (int64_t i = 0; i < labels.numel(); ++i) y.v[i * classes + static_cast<int64_t>(labels.v[i])] = 1.0;
  return y;
}

}  // namespace ref
}  // namespace tandem
