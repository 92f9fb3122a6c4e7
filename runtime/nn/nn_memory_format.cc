// Memory formats: is_channels_last, suggests_channels_last, to_channels_last, to_nchw and the front end's layout
// helpers.
#include "runtime/nn/nn_memory_format.h"

#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"

namespace tandem {

namespace {
Shape nhwc_strides(const Shape& s) { return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]}; }

// Identity on values: the gradient passes through whatever its layout.
void record_identity(const char* name, const Tensor& x, const Tensor& y) {
  autograd::record(name, {x}, {y},
                   [](std::vector<Tensor>& g, const std::vector<bool>&) { return std::vector<Tensor>{g[0]}; });
}

// x's memory read with other strides (which differ from x's on size-1 dims only): a view.
Tensor restrided(const Tensor& x, Shape strides, const char* name) {
  Tensor y(std::make_shared<TensorImpl>(x.storage(), x.storage_offset(), x.shape(), std::move(strides), x.dtype()));
  record_identity(name, x, y);
  return y;
}

Tensor copy_in_format(const Tensor& t, bool channels_last) {
  autograd::NoGradGuard ng;
  Tensor out = empty_in_format(t.shape(), t.options(), channels_last);
  out.copy_(t);
  return out;
}
}  // namespace

bool is_channels_last(const Tensor& x) {
  if (!x.defined() || x.dim() != 4) return false;
  int64_t expected = 1;
  for (int d : {1, 3, 2, 0}) {
    if (x.shape()[d] == 1) continue;
    if (x.strides()[d] != expected) return false;
    expected *= x.shape()[d];
  }
  return true;
}

// PyTorch's rule (suggest_memory_format): strides ordered C < W < H < N, size-1 dims taking the place their stride
// gives them, and NCHW where both orders fit (a contiguous [N, C, 1, 1] stays NCHW, a channels-last one stays
// channels-last): an NCHW run never turns channels-last.
bool suggests_channels_last(const Tensor& x) {
  if (!x.defined() || x.dim() != 4 || x.strides()[1] == 0) return false;
  int64_t min = 0;
  for (int d : {1, 3, 2, 0}) {
    const int64_t size = x.shape()[d], stride = x.strides()[d];
    if (size == 0 || stride < min || (d == 0 && min == x.strides()[1])) return false;
    min = size > 1 ? stride * size : stride;
  }
  return true;
}

Tensor empty_in_format(const Shape& shape, TensorOptions opts, bool channels_last) {
  if (!channels_last) return empty(shape, opts);
  TD_ASSERT(shape.size() == 4, "channels-last tensors are 4-D, got ", shape_str(shape));
  return empty({shape[0], shape[2], shape[3], shape[1]}, opts).permute({0, 3, 1, 2});
}

Tensor dense_in_format(const Tensor& t, bool channels_last) {
  if (channels_last ? is_channels_last(t) : t.is_contiguous()) return t;
  return copy_in_format(t, channels_last);
}

Tensor to_channels_last(const Tensor& x) {
  TD_CHECK_SHAPE(x.defined() && x.dim() == 4, "to_channels_last needs a 4-D [N, C, H, W] tensor, got ",
                 x.defined() ? shape_str(x.shape()) : "an undefined tensor");
  if (x.strides() == nhwc_strides(x.shape())) return x;
  // Already in NHWC order (size-1 dims aside): the same memory with NHWC's own strides, which ops then read as
  // channels-last (suggests_channels_last).
  if (is_channels_last(x)) return restrided(x, nhwc_strides(x.shape()), "to_channels_last");
  Tensor y = copy_in_format(x, true);
  record_identity("to_channels_last", x, y);
  return y;
}

Tensor to_nchw(const Tensor& x) {
  TD_CHECK_SHAPE(x.defined() && x.dim() == 4, "to_nchw needs a 4-D [N, C, H, W] tensor, got ",
                 x.defined() ? shape_str(x.shape()) : "an undefined tensor");
  if (x.strides() == contiguous_strides(x.shape())) return x;
  if (x.is_contiguous()) return restrided(x, contiguous_strides(x.shape()), "to_nchw");
  Tensor y = copy_in_format(x, false);
  record_identity("to_nchw", x, y);
  return y;
}

}  // namespace tandem
