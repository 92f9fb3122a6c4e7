// Indexing ops with i64 indices: index_select, gather, one_hot.
#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

namespace {
using autograd::SavedTensor;

void split_at(const Shape& s, int64_t dim, int64_t& outer, int64_t& inner) {
  outer = 1;
  inner = 1;
  for (int64_t i = 0; i < dim; ++i) outer *= s[i];
  for (size_t i = dim + 1; i < s.size(); ++i) inner *= s[i];
}

void check_index(const Tensor& x, const Tensor& index, const char* op) {
  check_same_device({x, index}, op);
  TD_CHECK_DTYPE(index.dtype() == DType::I64, op, ": indices must be i64, got ", dtype_name(index.dtype()));
}
// The backward of a read of x along a dim through indices ic (index_select, gather): the output's gradient
// added back into zeros of x's shape by `add` (Backend::index_add or scatter_add: the same fields).
template <class AddArgs>
void record_indexed_read(const char* op, void (Backend::*add)(const AddArgs&, const Stream&), const Tensor& x,
                         const Tensor& out, const Tensor& ic, int64_t outer, int64_t inner, int64_t n_src,
                         int64_t n_idx) {
  if (!autograd::any_requires_grad({x})) return;
  SavedTensor si(ic);
  Shape xs = x.shape();
  autograd::record(op, {x}, {out},
                   [op, add, si, xs, outer, inner, n_src, n_idx](std::vector<Tensor>& g, const std::vector<bool>&) {
                     Tensor gy = g[0].contiguous();
                     Tensor gx = zeros(xs, gy.options());
                     (backend_of(gx).*add)(AddArgs{gx.dtype(), gy.raw_data(), outer, n_idx, inner,
                                                   si.unpack(op).data<int64_t>(), n_src, gx.raw_data()},
                                           current_stream(gx.device()));
                     return std::vector<Tensor>{gx};
                   });
}
}  // namespace

Tensor index_select(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index(x, index, "index_select");
  TD_CHECK_SHAPE(index.dim() == 1, "index_select: indices must be 1-D, got ", shape_str(index.shape()));
  dim = wrap_dim(dim, x.dim());
  int64_t outer, inner;
  split_at(x.shape(), dim, outer, inner);
  Shape out_shape = x.shape();
  out_shape[dim] = index.numel();
  Tensor xc = x.contiguous(), ic = index.contiguous();
  Tensor out = empty(out_shape, x.options());
  if (out.numel() > 0)
    backend_of(x).index_select(
        {x.dtype(), xc.raw_data(), outer, x.shape()[dim], inner, ic.data<int64_t>(), index.numel(), out.raw_data()},
        current_stream(x.device()));
  record_indexed_read("index_select", &Backend::index_add, x, out, ic, outer, inner, x.shape()[dim], index.numel());
  return out;
}

Tensor gather(const Tensor& x, int64_t dim, const Tensor& index) {
  check_index(x, index, "gather");
  dim = wrap_dim(dim, x.dim());
  TD_CHECK_SHAPE(index.dim() == x.dim(), "gather: indices must have the input's rank ", x.dim(), ", got ",
                 shape_str(index.shape()));
  for (int64_t i = 0; i < x.dim(); ++i)
    TD_CHECK_SHAPE(i == dim || index.shape()[i] == x.shape()[i], "gather along dim ", dim, ": index shape ",
                   shape_str(index.shape()), " must match input shape ", shape_str(x.shape()), " outside that dim");
  int64_t outer, inner;
  split_at(x.shape(), dim, outer, inner);
  Tensor xc = x.contiguous(), ic = index.contiguous();
  Tensor out = empty(index.shape(), x.options());
  int64_t n_src = x.shape()[dim], n_idx = index.shape()[dim];
  if (out.numel() > 0)
    backend_of(x).gather({x.dtype(), xc.raw_data(), outer, n_src, inner, ic.data<int64_t>(), n_idx, out.raw_data()},
                         current_stream(x.device()));
  record_indexed_read("gather", &Backend::scatter_add, x, out, ic, outer, inner, n_src, n_idx);
  return out;
}

Tensor one_hot(const Tensor& labels, int64_t classes, DType dtype) {
  TD_CHECK_DTYPE(labels.dtype() == DType::I64, "one_hot: labels must be i64, got ", dtype_name(labels.dtype()));
  TD_CHECK(classes > 0, "one_hot: the number of classes must be positive, got ", classes);
  Shape s = labels.shape();
  s.push_back(classes);
  Tensor out = empty(s, TensorOptions(dtype).with_device(labels.device()));
  Tensor lc = labels.contiguous();
  if (out.numel() > 0)
    backend_of(labels).one_hot({lc.data<int64_t>(), labels.numel(), classes, dtype, out.raw_data()},
                               current_stream(labels.device()));
  return out;
}

}  // namespace tandem
