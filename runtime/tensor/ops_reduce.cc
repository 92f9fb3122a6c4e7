// Reductions (sum, mean, amax, max/argmax), sum_to, softmax and log_softmax.
#include <algorithm>
#include <numeric>

#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/layout.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

namespace {
using autograd::SavedTensor;

// Sorted, unique, wrapped reduction dims; all dims when `dims` is empty.
std::vector<int64_t> reduction_dims(const Tensor& x, const std::vector<int64_t>& dims) {
  std::vector<int64_t> d;
  if (dims.empty()) {
    d.resize(x.dim());
    std::iota(d.begin(), d.end(), 0);
    return d;
  }
  TD_CHECK_SHAPE(x.dim() > 0, "cannot reduce a 0-dim tensor over a dim");
  for (int64_t v : dims) d.push_back(wrap_dim(v, x.dim()));
  std::sort(d.begin(), d.end());
  TD_CHECK_SHAPE(std::adjacent_find(d.begin(), d.end()) == d.end(), "a reduction dim is repeated");
  return d;
}

Shape reduced_shape(const Shape& s, const std::vector<int64_t>& dims, bool keepdim) {
  Shape out;
  for (int64_t i = 0; i < static_cast<int64_t>(s.size()); ++i) {
    bool red = std::binary_search(dims.begin(), dims.end(), i);
    if (!red)
      out.push_back(s[i]);
    else if (keepdim)
      out.push_back(1);
  }
  return out;
}

struct Reduced {
  Tensor values;   // keepdim shape
  Tensor indices;  // keepdim shape, i64 (Max/Min over one dim)
};

// Whether dense x can be read as [outer, r, inner] in its own memory order: the reduced dims (sizes > 1) form one
// run in that order and the kept ones lie in memory in the order of their dims (so the output is row-major). A
// channels-last tensor summed over (N, H, W) is one: [1, N*H*W, C].
bool dense_run(const Tensor& x, const std::vector<int64_t>& dims, int64_t* outer, int64_t* r, int64_t* inner) {
  if (!is_dense(x)) return false;
  enum { Before, In, After } phase = Before;
  int64_t last_kept = -1, o = 1, n = 1, i = 1;
  for (int d : memory_order(x)) {
    const int64_t size = x.shape()[d];
    if (size == 1) continue;
    if (std::binary_search(dims.begin(), dims.end(), d)) {
      if (phase == After) return false;
      phase = In;
      n *= size;
    } else {
      if (d < last_kept) return false;
      last_kept = d;
      if (phase == In) phase = After;
      (phase == Before ? o : i) *= size;
    }
  }
  *outer = o;
  *r = n;
  *inner = i;
  return true;
}

// Reduces x over `dims` with one kernel call on a [outer, r, inner] layout.
Reduced reduce_raw(ReduceOp op, const Tensor& x, const std::vector<int64_t>& dims, bool want_indices) {
  Shape keep = reduced_shape(x.shape(), dims, true);
  Tensor src = x;
  int64_t outer = 1, r = 1, inner = 1;
  bool contiguous_range = !dims.empty() && dims.back() - dims.front() + 1 == static_cast<int64_t>(dims.size());
  if (x.is_contiguous() && contiguous_range) {
    for (int64_t i = 0; i < x.dim(); ++i) {
      if (i < dims.front())
        outer *= x.shape()[i];
      else if (i <= dims.back())
        r *= x.shape()[i];
      else
        inner *= x.shape()[i];
    }
  } else if (x.is_contiguous() || !dense_run(x, dims, &outer, &r, &inner)) {
    std::vector<int64_t> perm;
    for (int64_t i = 0; i < x.dim(); ++i)
      if (!std::binary_search(dims.begin(), dims.end(), i)) perm.push_back(i);
    for (int64_t i : dims) perm.push_back(i);
    autograd::NoGradGuard ng;
    src = x.permute(perm).contiguous();
    for (int64_t i : dims) r *= x.shape()[i];
    outer = x.numel() / std::max<int64_t>(r, 1);
  }
  TD_CHECK_SHAPE(r > 0 || op == ReduceOp::Sum, "max/min over an empty dimension of a tensor of shape ",
                 shape_str(x.shape()));
  Reduced out;
  TensorOptions o = x.options();
  out.values = empty(keep, o);
  if (want_indices) out.indices = empty(keep, o.with_dtype(DType::I64));
  if (out.values.numel() > 0)
    backend_of(x).reduce({op, x.dtype(), src.raw_data(), outer, r, inner, out.values.raw_data(),
                          want_indices ? out.indices.data<int64_t>() : nullptr},
                         current_stream(x.device()));
  return out;
}

Tensor maybe_squeeze(const Tensor& t, const Shape& target) { return t.shape() == target ? t : t.view(target); }
}  // namespace

Tensor sum(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_float(x, "sum");
  auto d = reduction_dims(x, dims);
  Tensor y = maybe_squeeze(reduce_raw(ReduceOp::Sum, x, d, false).values, reduced_shape(x.shape(), d, keepdim));
  Shape xs = x.shape(), ks = reduced_shape(x.shape(), d, true);
  autograd::record("sum", {x}, {y}, [xs, ks](std::vector<Tensor>& g, const std::vector<bool>&) {
    return std::vector<Tensor>{g[0].reshape(ks).expand(xs)};
  });
  return y;
}

Tensor mean(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  auto d = reduction_dims(x, dims);
  int64_t n = 1;
  for (int64_t i : d) n *= x.shape()[i];
  TD_CHECK_SHAPE(n > 0, "mean over an empty dimension of a tensor of shape ", shape_str(x.shape()));
  return mul(sum(x, d, keepdim), 1.0 / static_cast<double>(n));
}

Tensor amax(const Tensor& x, const std::vector<int64_t>& dims, bool keepdim) {
  check_float(x, "amax");
  auto d = reduction_dims(x, dims);
  Tensor yk = reduce_raw(ReduceOp::Max, x, d, false).values;
  Tensor y = maybe_squeeze(yk, reduced_shape(x.shape(), d, keepdim));
  if (autograd::any_requires_grad({x})) {
    SavedTensor sx(x), sy(yk);
    Shape xs = x.shape(), ks = yk.shape();
    std::vector<int64_t> dd = d;
    autograd::record("amax", {x}, {y}, [sx, sy, xs, ks, dd](std::vector<Tensor>& g, const std::vector<bool>&) {
      // Ties share the gradient evenly.
      Tensor mask = eq(sx.unpack("amax"), sy.unpack("amax")).to(g[0].dtype());
      Tensor count = sum(mask, dd, true);
      return std::vector<Tensor>{div(mul(mask, g[0].reshape(ks)), count)};
    });
  }
  return y;
}

MaxResult max(const Tensor& x, int64_t dim, bool keepdim) {
  check_float(x, "max");
  std::vector<int64_t> d{wrap_dim(dim, x.dim())};
  Reduced r = reduce_raw(ReduceOp::Max, x, d, true);
  Shape target = reduced_shape(x.shape(), d, keepdim);
  MaxResult out{maybe_squeeze(r.values, target), maybe_squeeze(r.indices, target)};
  if (autograd::any_requires_grad({x})) {
    SavedTensor idx(r.indices);
    Shape xs = x.shape(), ks = r.values.shape();
    int64_t dd = d[0];
    autograd::record(
        "max", {x}, {out.values, out.indices}, [idx, xs, ks, dd](std::vector<Tensor>& g, const std::vector<bool>&) {
          // Scatter into the positions the forward picked.
          Tensor gx = zeros(xs, g[0].options());
          Tensor gk = g[0].reshape(ks).contiguous();
          int64_t outer = 1, inner = 1;
          for (int64_t i = 0; i < dd; ++i) outer *= xs[i];
          for (size_t i = dd + 1; i < xs.size(); ++i) inner *= xs[i];
          backend_of(gx).scatter_add(
              {gx.dtype(), gk.raw_data(), outer, 1, inner, idx.unpack("max").data<int64_t>(), xs[dd], gx.raw_data()},
              current_stream(gx.device()));
          return std::vector<Tensor>{gx};
        });
  }
  return out;
}

Tensor argmax(const Tensor& x, int64_t dim, bool keepdim) {
  autograd::NoGradGuard ng;
  return max(x, dim, keepdim).indices;
}

Tensor sum_to(const Tensor& x, const Shape& shape) {
  if (x.shape() == shape) return x;
  int64_t lead = x.dim() - static_cast<int64_t>(shape.size());
  TD_CHECK_SHAPE(lead >= 0, "sum_to: cannot reduce ", shape_str(x.shape()), " to ", shape_str(shape));
  std::vector<int64_t> dims;
  for (int64_t i = 0; i < x.dim(); ++i) {
    if (i < lead) {
      dims.push_back(i);
    } else if (shape[i - lead] == 1 && x.shape()[i] != 1) {
      dims.push_back(i);
    } else {
      TD_CHECK_SHAPE(shape[i - lead] == x.shape()[i], "sum_to: cannot reduce ", shape_str(x.shape()), " to ",
                     shape_str(shape));
    }
  }
  if (dims.empty()) return x.reshape(shape);
  return sum(x, dims, true).reshape(shape);
}

namespace {
Tensor softmax_impl(const Tensor& x, int64_t dim, bool log) {
  const char* name = log ? "log_softmax" : "softmax";
  check_float(x, name);
  dim = wrap_dim(dim, std::max<int64_t>(x.dim(), 1));  // a 0-dim tensor is one class along dim 0 (or -1)
  Tensor xc = x.contiguous();
  int64_t outer = 1, n = x.dim() == 0 ? 1 : x.shape()[dim], inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= x.shape()[i];
  for (int64_t i = dim + 1; i < x.dim(); ++i) inner *= x.shape()[i];
  Tensor y = empty(x.shape(), x.options());
  if (y.numel() > 0)
    backend_of(x).softmax({log, x.dtype(), xc.raw_data(), y.raw_data(), outer, n, inner}, current_stream(x.device()));
  if (autograd::any_requires_grad({x})) {
    SavedTensor sy(y);
    std::string nm = name;
    autograd::record(nm, {x}, {y}, [sy, outer, n, inner, log, nm](std::vector<Tensor>& g, const std::vector<bool>&) {
      Tensor yv = sy.unpack(nm);
      Tensor gy = g[0].contiguous();
      Tensor gx = empty_like(yv);
      backend_of(yv).softmax_backward({log, yv.dtype(), yv.raw_data(), gy.raw_data(), gx.raw_data(), outer, n, inner},
                                      current_stream(yv.device()));
      return std::vector<Tensor>{gx};
    });
  }
  return y;
}
}  // namespace

Tensor softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, false); }
Tensor log_softmax(const Tensor& x, int64_t dim) { return softmax_impl(x, dim, true); }

}  // namespace tandem
