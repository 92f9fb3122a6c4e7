// conv2d: checks, dispatch to the NN backend, and its backward (data, weight, bias).
#include "runtime/base/error.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/nn/nn_memory_format.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/precision.h"
#include "runtime/tensor/profiler.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

namespace {
using autograd::SavedTensor;

Conv2dGeometry conv_geometry(const Tensor& x, const Tensor& weight, const Conv2dOptions& o) {
  const Shape &xs = x.shape(), &ws = weight.shape();
  TD_CHECK(o.groups >= 1, "conv2d: groups must be >= 1, got ", o.groups);
  TD_CHECK(o.stride_h >= 1 && o.stride_w >= 1, "conv2d: strides must be >= 1, got (", o.stride_h, ", ", o.stride_w,
           ")");
  TD_CHECK(o.pad_h >= 0 && o.pad_w >= 0, "conv2d: padding must be >= 0, got (", o.pad_h, ", ", o.pad_w, ")");
  TD_CHECK(o.dilation_h >= 1 && o.dilation_w >= 1, "conv2d: dilation must be >= 1, got (", o.dilation_h, ", ",
           o.dilation_w, ")");
  TD_CHECK_SHAPE(xs[1] % o.groups == 0 && ws[0] % o.groups == 0, "conv2d: input channels ", xs[1],
                 " and output channels ", ws[0], " must both be divisible by groups = ", o.groups, " (input ",
                 shape_str(xs), ", weight ", shape_str(ws), ")");
  TD_CHECK_SHAPE(ws[1] * o.groups == xs[1], "conv2d: weight ", shape_str(ws), " expects ", ws[1] * o.groups,
                 " input channels (", ws[1], " per group x ", o.groups, " groups) but the input ", shape_str(xs),
                 " has ", xs[1]);
  TD_CHECK_SHAPE(ws[2] >= 1 && ws[3] >= 1, "conv2d: empty kernel in weight ", shape_str(ws));
  Conv2dGeometry g;
  g.dtype = x.dtype();
  // PyTorch's rule: channels-last when the input or the weight suggests it.
  g.channels_last = suggests_channels_last(x) || suggests_channels_last(weight);
  g.n = xs[0];
  g.c = xs[1];
  g.h = xs[2];
  g.w = xs[3];
  g.o = ws[0];
  g.kh = ws[2];
  g.kw = ws[3];
  g.stride_h = o.stride_h;
  g.stride_w = o.stride_w;
  g.pad_h = o.pad_h;
  g.pad_w = o.pad_w;
  g.dilation_h = o.dilation_h;
  g.dilation_w = o.dilation_w;
  g.groups = o.groups;
  int64_t span_h = g.h + 2 * g.pad_h - g.dilation_h * (g.kh - 1) - 1;
  int64_t span_w = g.w + 2 * g.pad_w - g.dilation_w * (g.kw - 1) - 1;
  TD_CHECK_SHAPE(span_h >= 0 && span_w >= 0, "conv2d: the (dilated) kernel ", g.kh, "x", g.kw,
                 " is larger than the padded input ", g.h + 2 * g.pad_h, "x", g.w + 2 * g.pad_w, " (input ",
                 shape_str(xs), ")");
  g.oh = span_h / g.stride_h + 1;
  g.ow = span_w / g.stride_w + 1;
  return g;
}

// The input's gradient from gy: added in place into the pending gradient `into` offers for input `i` when it is
// dense in the convolution's layout (the backend adds the result in one rounding, as the separate add would;
// not bf16, whose cuDNN blend would skip the result's own rounding), else a fresh tensor.
Tensor data_gradient(const Conv2dGeometry& g, const Tensor& gy, const Tensor& w, bool empty_work, size_t i,
                     autograd::InPlaceGrads& into) {
  const Shape shape{g.n, g.c, g.h, g.w};
  const Tensor& pending = into.offered(i);
  const bool in_place = pending.defined() && !empty_work && g.dtype != DType::BF16 && pending.dtype() == g.dtype &&
                        pending.shape() == shape &&
                        (g.channels_last ? is_channels_last(pending) : pending.is_contiguous());
  Tensor gx = in_place ? pending : empty_in_format(shape, gy.options(), g.channels_last);
  if (empty_work) {
    gx.fill_(0.0);
    return gx;
  }
  nn_backend_for(gy.device())
      .conv2d_backward_data({g, gy.raw_data(), w.raw_data(), gx.raw_data(), in_place}, current_stream(gy.device()));
  if (!in_place) return gx;
  into.accumulated(i);
  return Tensor();
}
}  // namespace

Tensor conv2d(const Tensor& x, const Tensor& weight, const Tensor& bias, const Conv2dOptions& o) {
  ProfileScope scope("conv2d");
  if (lowers_to_bf16({&x, &weight, &bias})) return conv2d(bf16_operand(x), bf16_operand(weight), bf16_operand(bias), o);
  std::vector<Tensor> operands{x, weight};
  if (bias.defined()) operands.push_back(bias);
  check_same_device(operands, "conv2d");
  check_same_dtype(operands, "conv2d");
  check_float_or_bf16(x, "conv2d");
  TD_CHECK_SHAPE(x.dim() == 4, "conv2d: input must be 4-D [N, C, H, W], got ", shape_str(x.shape()));
  TD_CHECK_SHAPE(weight.dim() == 4, "conv2d: weight must be 4-D [O, C / groups, kh, kw], got ",
                 shape_str(weight.shape()));
  TD_CHECK_SHAPE(!bias.defined() || (bias.dim() == 1 && bias.shape()[0] == weight.shape()[0]), "conv2d: bias must be [",
                 weight.shape()[0], "] for weight ", shape_str(weight.shape()), ", got ",
                 bias.defined() ? shape_str(bias.shape()) : "");
  const Conv2dGeometry g = conv_geometry(x, weight, o);
  const bool cl = g.channels_last;
  Tensor xd = dense_in_format(x, cl), wd = dense_in_format(weight, cl);
  Tensor bd = bias.defined() ? bias.contiguous() : Tensor();
  TensorOptions opts = x.options();
  Tensor y = empty_in_format({g.n, g.o, g.oh, g.ow}, opts, cl);
  if (y.numel() > 0) {
    if (x.numel() == 0) {
      y.fill_(0.0);
      if (bd.defined()) y = add(y, bd.view({1, g.o, 1, 1}));
    } else {
      // bf16: the convolution's result is rounded, then the bias added (rounded again) as an elementwise op, on
      // both backends: cuDNN's bf16 convolution stores its result before a bias can be added.
      const bool bias_apart = bd.defined() && g.dtype == DType::BF16;
      nn_backend_for(x.device())
          .conv2d_forward(
              {g, xd.raw_data(), wd.raw_data(), bd.defined() && !bias_apart ? bd.raw_data() : nullptr, y.raw_data()},
              current_stream(x.device()));
      if (bias_apart) {
        autograd::NoGradGuard ng;
        add_(y, bd.view({1, g.o, 1, 1}));
      }
    }
  }
  if (autograd::any_requires_grad(operands)) {
    SavedTensor sx(weight.requires_grad() ? xd : Tensor()), sw(x.requires_grad() ? wd : Tensor());
    bool weight_cl = is_channels_last(weight);
    autograd::record_into("conv2d", operands, {y},
                          [g, sx, sw, weight_cl](std::vector<Tensor>& grads, const std::vector<bool>& need,
                                                 autograd::InPlaceGrads& into) {
                            const bool cl = g.channels_last;
                            Tensor gy = dense_in_format(grads[0], cl);
                            TensorOptions opts = gy.options();
                            Stream stream = current_stream(gy.device());
                            bool empty_work = gy.numel() == 0 || g.n * g.c * g.h * g.w == 0;
                            std::vector<Tensor> out(need.size());
                            if (need[0]) out[0] = data_gradient(g, gy, sw.unpack("conv2d"), empty_work, 0, into);
                            if (need[1]) {
                              Tensor gw = empty_in_format({g.o, g.c / g.groups, g.kh, g.kw}, opts, cl);
                              if (empty_work)
                                gw.fill_(0.0);
                              else
                                nn_backend_for(gy.device())
                                    .conv2d_backward_weight(
                                        {g, sx.unpack("conv2d").raw_data(), gy.raw_data(), gw.raw_data()}, stream);
                              out[1] = dense_in_format(gw, weight_cl);
                            }
                            if (need.size() > 2 && need[2]) out[2] = sum(gy, {0, 2, 3});
                            return out;
                          });
  }
  return y;
}

}  // namespace tandem
