// Memory formats: is_channels_last, to_channels_last, to_nchw and the front end's layout helpers.
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

Tensor copy_in_format(const Tensor& t, bool channels_last) {
  autograd::NoGradGuard ng;
  Tensor out = empty_in_format(t.shape(), t.options(), channels_last);
  out.copy_(t);
  return out;
}
}  // namespace

bool is_channels_last(const Tensor& x) { return x.defined() && x.dim() == 4 && x.strides() == nhwc_strides(x.shape()); }

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
  if (is_channels_last(x)) return x;
  Tensor y = copy_in_format(x, true);
  record_identity("to_channels_last", x, y);
  return y;
}

Tensor to_nchw(const Tensor& x) {
  TD_CHECK_SHAPE(x.defined() && x.dim() == 4, "to_nchw needs a 4-D [N, C, H, W] tensor, got ",
                 x.defined() ? shape_str(x.shape()) : "an undefined tensor");
  if (x.strides() == contiguous_strides(x.shape())) return x;
  Tensor y = copy_in_format(x, false);
  record_identity("to_nchw", x, y);
  return y;
}

}  // namespace tandem
