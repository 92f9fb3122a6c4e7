// max_pool2d, avg_pool2d and global_avg_pool2d: output sizes (ceil_mode), checks, dispatch, backward.
#include <limits>

#include "runtime/base/error.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/nn/nn_memory_format.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

namespace {
using autograd::SavedTensor;

// Output length along one axis, PyTorch's rule: with ceil_mode the last window must start inside the
// input or its left padding.
int64_t pooled_size(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  int64_t span = in + 2 * p - k;
  int64_t out = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (out - 1) * s >= in + p) --out;
  return out;
}

Pool2dGeometry pool_geometry(const char* op, const Tensor& x, const Pool2dOptions& o) {
  TD_CHECK(x.defined(), op, ": the input is undefined");
  check_float(x, op);
  TD_CHECK_SHAPE(x.dim() == 4, op, " needs a 4-D [N, C, H, W] input, got ", shape_str(x.shape()));
  TD_CHECK(o.kernel_h >= 1 && o.kernel_w >= 1, op, ": kernel size must be >= 1, got (", o.kernel_h, ", ", o.kernel_w,
           ")");
  TD_CHECK(o.stride_h >= 1 && o.stride_w >= 1, op, ": stride must be >= 1, got (", o.stride_h, ", ", o.stride_w, ")");
  TD_CHECK(o.pad_h >= 0 && o.pad_w >= 0 && 2 * o.pad_h <= o.kernel_h && 2 * o.pad_w <= o.kernel_w, op,
           ": padding must be between 0 and half the kernel size, got padding (", o.pad_h, ", ", o.pad_w,
           ") for kernel (", o.kernel_h, ", ", o.kernel_w, ")");
  Pool2dGeometry g;
  g.dtype = x.dtype();
  g.channels_last = suggests_channels_last(x);
  g.n = x.shape()[0];
  g.c = x.shape()[1];
  g.h = x.shape()[2];
  g.w = x.shape()[3];
  TD_CHECK_SHAPE(g.h + 2 * o.pad_h >= o.kernel_h && g.w + 2 * o.pad_w >= o.kernel_w, op, ": kernel (", o.kernel_h, ", ",
                 o.kernel_w, ") is larger than the padded input of shape ", shape_str(x.shape()), " with padding (",
                 o.pad_h, ", ", o.pad_w, ")");
  TD_CHECK_SHAPE(g.h * g.w <= std::numeric_limits<int32_t>::max(), op, ": planes of ", g.h, "x", g.w, " are too large");
  g.kernel_h = o.kernel_h;
  g.kernel_w = o.kernel_w;
  g.stride_h = o.stride_h;
  g.stride_w = o.stride_w;
  g.pad_h = o.pad_h;
  g.pad_w = o.pad_w;
  g.count_include_pad = o.count_include_pad;
  g.oh = pooled_size(g.h, o.kernel_h, o.stride_h, o.pad_h, o.ceil_mode);
  g.ow = pooled_size(g.w, o.kernel_w, o.stride_w, o.pad_w, o.ceil_mode);
  return g;
}

Tensor avg_pool(const Tensor& x, const Pool2dGeometry& g) {
  Tensor xd = dense_in_format(x, g.channels_last);
  Tensor y = empty_in_format({g.n, g.c, g.oh, g.ow}, x.options(), g.channels_last);
  if (y.numel() > 0)
    nn_backend_for(x.device()).avg_pool2d_forward({g, xd.raw_data(), y.raw_data()}, current_stream(x.device()));
  autograd::record("avg_pool2d", {x}, {y}, [g](std::vector<Tensor>& grads, const std::vector<bool>&) {
    Tensor gy = dense_in_format(grads[0], g.channels_last);
    Tensor gx = empty_in_format({g.n, g.c, g.h, g.w}, gy.options(), g.channels_last);
    if (gx.numel() > 0)
      nn_backend_for(gy.device()).avg_pool2d_backward({g, gy.raw_data(), gx.raw_data()}, current_stream(gy.device()));
    return std::vector<Tensor>{gx};
  });
  return y;
}
}  // namespace

Tensor max_pool2d(const Tensor& x, const Pool2dOptions& o) {
  Pool2dGeometry g = pool_geometry("max_pool2d", x, o);
  Tensor xd = dense_in_format(x, g.channels_last);
  Tensor y = empty_in_format({g.n, g.c, g.oh, g.ow}, x.options(), g.channels_last);
  Tensor indices = empty_in_format(y.shape(), x.options().with_dtype(DType::I32), g.channels_last);
  if (y.numel() > 0)
    nn_backend_for(x.device())
        .max_pool2d_forward({g, xd.raw_data(), y.raw_data(), indices.data<int32_t>()}, current_stream(x.device()));
  if (autograd::any_requires_grad({x})) {
    SavedTensor si(indices);
    autograd::record("max_pool2d", {x}, {y}, [g, si](std::vector<Tensor>& grads, const std::vector<bool>&) {
      Tensor gy = dense_in_format(grads[0], g.channels_last);
      Tensor gx = empty_in_format({g.n, g.c, g.h, g.w}, gy.options(), g.channels_last);
      if (gx.numel() > 0)
        nn_backend_for(gy.device())
            .max_pool2d_backward({g, gy.raw_data(), si.unpack("max_pool2d").data<int32_t>(), gx.raw_data()},
                                 current_stream(gy.device()));
      return std::vector<Tensor>{gx};
    });
  }
  return y;
}

Tensor avg_pool2d(const Tensor& x, const Pool2dOptions& o) { return avg_pool(x, pool_geometry("avg_pool2d", x, o)); }

Tensor global_avg_pool2d(const Tensor& x) {
  TD_CHECK_SHAPE(x.defined() && x.dim() == 4, "global_avg_pool2d needs a 4-D [N, C, H, W] input, got ",
                 x.defined() ? shape_str(x.shape()) : "an undefined tensor");
  TD_CHECK_SHAPE(x.shape()[2] >= 1 && x.shape()[3] >= 1, "global_avg_pool2d: empty spatial size in ",
                 shape_str(x.shape()));
  Pool2dOptions o;
  o.kernel_h = o.stride_h = x.shape()[2];
  o.kernel_w = o.stride_w = x.shape()[3];
  o.pad_h = o.pad_w = 0;
  Pool2dGeometry g = pool_geometry("global_avg_pool2d", x, o);
  return avg_pool(x, g).reshape({g.n, g.c});
}

}  // namespace tandem
