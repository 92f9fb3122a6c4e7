// conv2d cases: a direct-loop f64 reference over small shapes covering every option and every CPU path
// (GEMM, chunked GEMM, pointwise, direct), in NCHW and channels-last.
#include <gtest/gtest.h>

#include <algorithm>

#include "runtime/nn/nn_ops.h"
#include "tests/nn/nn_cases.h"

namespace tandem {
namespace testing {

namespace {

struct ConvShape {
  const char* name;
  int64_t n, c, h, w, o, kh, kw;
  Conv2dOptions opt;
  bool bias;
};

std::vector<ConvShape> shapes() {
  return {
      {"3x3_padding", 2, 3, 7, 6, 4, 3, 3, Conv2dOptions{1, 1, 1, 1, 1, 1, 1}, true},
      {"stride_rect_kernel", 2, 4, 9, 8, 6, 3, 2, Conv2dOptions{2, 1, 0, 1, 1, 1, 1}, false},
      {"dilation", 1, 2, 9, 9, 3, 3, 3, Conv2dOptions{1, 1, 2, 2, 2, 2, 1}, true},
      {"groups", 2, 4, 6, 5, 6, 3, 3, Conv2dOptions{1, 2, 1, 0, 1, 1, 2}, true},
      {"depthwise", 2, 4, 7, 7, 4, 3, 3, Conv2dOptions{2, 2, 1, 1, 1, 1, 4}, true},
      {"depthwise_x2_dilation", 2, 3, 6, 6, 6, 3, 3, Conv2dOptions{1, 1, 1, 1, 2, 1, 3}, false},
      {"one_input_channel", 2, 1, 8, 7, 5, 3, 3, Conv2dOptions{1, 1, 1, 1, 1, 1, 1}, true},
      {"pointwise_batched", 3, 8, 5, 5, 6, 1, 1, Conv2dOptions{1, 1, 0, 0, 1, 1, 1}, true},
      {"pointwise_one_image_per_gemm", 1, 3, 33, 32, 2, 1, 1, Conv2dOptions{1, 1, 0, 0, 1, 1, 1}, false},
      {"more_chunks_than_weight_slots", 10, 2, 33, 33, 3, 3, 3, Conv2dOptions{1, 1, 1, 1, 1, 1, 1}, true},
  };
}

// Direct f64 convolution of x [n, c, h, w] and w [o, c/g, kh, kw] (and b [o]).
HostTensor reference_conv(const ConvShape& k, const HostTensor& x, const HostTensor& w, const HostTensor* b) {
  const Conv2dOptions& o = k.opt;
  const int64_t oh = (k.h + 2 * o.pad_h - o.dilation_h * (k.kh - 1) - 1) / o.stride_h + 1;
  const int64_t ow = (k.w + 2 * o.pad_w - o.dilation_w * (k.kw - 1) - 1) / o.stride_w + 1;
  const int64_t cg = k.c / o.groups, og = k.o / o.groups;
  HostTensor y({k.n, k.o, oh, ow});
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t oc = 0; oc < k.o; ++oc)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = b ? b->v[oc] : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t a = 0; a < k.kh; ++a)
              for (int64_t bb = 0; bb < k.kw; ++bb) {
                const int64_t ih = i * o.stride_h - o.pad_h + a * o.dilation_h;
                const int64_t iw = j * o.stride_w - o.pad_w + bb * o.dilation_w;
                if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
                s += x.at({n, (oc / og) * cg + ci, ih, iw}) * w.at({oc, ci, a, bb});
              }
          y.at({n, oc, i, j}) = s;
        }
  return y;
}

// Channels-last: the weight too unless nchw_weight, as a channels-last model holds it (the convolution then
// copies neither).
OpCase conv_case(const ConvShape& k, bool channels_last, bool grad, const std::string& suffix,
                 bool nchw_weight = false) {
  InputSpec x = float_in({k.n, k.c, k.h, k.w}), w = float_in({k.o, k.c / k.opt.groups, k.kh, k.kw});
  std::vector<InputSpec> in = {channels_last ? in_channels_last(x) : x,
                               channels_last && !nchw_weight ? in_channels_last(w) : w};
  if (k.bias) in.push_back(float_in({k.o}));
  OpCase c = make_case(
      std::string("conv2d_") + k.name + (channels_last ? "_channels_last" : "") + suffix, in,
      [k, channels_last](const TV& t, DType) {
        Tensor y = conv2d(t[0], t[1], k.bias ? t[2] : Tensor(), k.opt);
        EXPECT_EQ(is_channels_last(y), channels_last) << "conv2d's output keeps the input's memory format";
        return TV{y};
      },
      [k](const HV& t) { return HV{reference_conv(k, t[0], t[1], k.bias ? &t[2] : nullptr)}; }, grad);
  c.tol_f32 = 1e-4;  // sums of up to 72 products
  // Each output element sums (c / groups) * kh * kw products: a multiply and an add each (the bias not counted).
  const double depth = static_cast<double>(k.c / k.opt.groups * k.kh * k.kw);
  c.flops = [depth](const std::vector<Shape>&, const std::vector<Shape>& out) {
    return 2.0 * depth * shape_elements(out.at(0));
  };
  c.batch_inputs = {0};
  return c;
}
}  // namespace

std::vector<OpCase> conv_cases() {
  std::vector<OpCase> cs;
  for (bool cl : {false, true})
    for (const ConvShape& k : shapes()) {
      // Finite differences cost two forwards per element: gradients on the shape shrunk to at most 2 images
      // of 9x8 (the full size's forward as a case of its own where that shrinks it).
      ConvShape small = k;
      small.n = std::min<int64_t>(k.n, 2);
      small.h = std::min<int64_t>(k.h, 9);
      small.w = std::min<int64_t>(k.w, 8);
      const bool shrunk = small.n != k.n || small.h != k.h || small.w != k.w;
      if (shrunk) cs.push_back(conv_case(k, cl, false, ""));
      cs.push_back(conv_case(small, cl, true, shrunk ? "_small" : ""));
    }
  // A channels-last input with an NCHW weight, which the convolution converts.
  cs.push_back(conv_case(shapes().at(0), true, true, "_nchw_weight", true));
  // MobileNetV2's depthwise 3x3 (stride 1, padding 1) over 64 channels, channels-last: its output checked here (its
  // gradients on the CUDA kernels in tests/nn:depthwise_conv_test); kernels_bench times it at [batch, 64, 56, 56].
  cs.push_back(conv_case({"depthwise_3x3_c64", 1, 64, 5, 5, 64, 3, 3, Conv2dOptions{1, 1, 1, 1, 1, 1, 64}, false}, true,
                         false, ""));
  return cs;
}

}  // namespace testing
}  // namespace tandem
