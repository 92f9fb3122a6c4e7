// concat, split and chunk along any dim.
#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

Tensor concat(const std::vector<Tensor>& ts, int64_t dim) {
  TD_CHECK(!ts.empty(), "concat of an empty list of tensors");
  check_same_device(ts, "concat");
  check_same_dtype(ts, "concat");
  const Tensor& first = ts[0];
  dim = wrap_dim(dim, first.dim());
  Shape out_shape = first.shape();
  out_shape[dim] = 0;
  std::vector<int64_t> sizes;
  for (const Tensor& t : ts) {
    TD_CHECK_SHAPE(t.dim() == first.dim(), "concat: tensors have different ranks (", shape_str(first.shape()), " and ",
                   shape_str(t.shape()), ")");
    for (int64_t i = 0; i < t.dim(); ++i)
      TD_CHECK_SHAPE(i == dim || t.shape()[i] == first.shape()[i], "concat along dim ", dim, ": shapes ",
                     shape_str(first.shape()), " and ", shape_str(t.shape()), " differ in dim ", i);
    sizes.push_back(t.shape()[dim]);
    out_shape[dim] += t.shape()[dim];
  }
  Tensor out = empty(out_shape, first.options());
  {
    autograd::NoGradGuard ng;
    int64_t offset = 0;
    for (const Tensor& t : ts) {
      out.narrow(dim, offset, t.shape()[dim]).copy_(t);
      offset += t.shape()[dim];
    }
  }
  autograd::record("concat", ts, {out}, [sizes, dim](std::vector<Tensor>& g, const std::vector<bool>& need) {
    std::vector<Tensor> grads(sizes.size());
    int64_t offset = 0;
    for (size_t i = 0; i < sizes.size(); ++i) {
      if (need[i]) grads[i] = g[0].narrow(dim, offset, sizes[i]);
      offset += sizes[i];
    }
    return grads;
  });
  return out;
}

std::vector<Tensor> split(const Tensor& x, const std::vector<int64_t>& sizes, int64_t dim) {
  dim = wrap_dim(dim, x.dim());
  int64_t total = 0;
  for (int64_t s : sizes) {
    TD_CHECK_SHAPE(s >= 0, "split: negative size ", s);
    total += s;
  }
  TD_CHECK_SHAPE(total == x.shape()[dim], "split: sizes add up to ", total, " but dim ", dim, " has size ",
                 x.shape()[dim]);
  std::vector<Tensor> parts;
  {
    autograd::NoGradGuard ng;  // one node below covers every part
    int64_t offset = 0;
    for (int64_t s : sizes) {
      parts.push_back(x.narrow(dim, offset, s));
      offset += s;
    }
  }
  autograd::record("split", {x}, parts, [dim](std::vector<Tensor>& g, const std::vector<bool>&) {
    return std::vector<Tensor>{concat(g, dim)};
  });
  return parts;
}

std::vector<Tensor> split(const Tensor& x, int64_t size, int64_t dim) {
  TD_CHECK_SHAPE(size > 0, "split: piece size must be positive, got ", size);
  dim = wrap_dim(dim, x.dim());
  std::vector<int64_t> sizes;
  for (int64_t left = x.shape()[dim]; left > 0; left -= size) sizes.push_back(std::min(size, left));
  if (sizes.empty()) sizes.push_back(0);
  return split(x, sizes, dim);
}

std::vector<Tensor> chunk(const Tensor& x, int64_t chunks, int64_t dim) {
  TD_CHECK_SHAPE(chunks > 0, "chunk: number of chunks must be positive, got ", chunks);
  int64_t n = x.shape()[wrap_dim(dim, x.dim())];
  return split(x, std::max<int64_t>((n + chunks - 1) / chunks, 1), dim);
}

}  // namespace tandem
