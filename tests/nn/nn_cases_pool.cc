// Pooling cases: max and average pooling against an f64 reference of PyTorch's windows (padding, ceil_mode,
// count_include_pad, output sizes worked out by hand), in NCHW and channels-last; global average pooling.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <limits>

#include "runtime/nn/nn_ops.h"
#include "tests/nn/nn_cases.h"

namespace tandem {
namespace testing {

namespace {

struct PoolShape {
  const char* name;
  int64_t h, w;
  Pool2dOptions o;
  int64_t oh, ow;  // expected output size (worked out by hand from PyTorch's rule)
};

std::vector<PoolShape> shapes() {
  return {
      {"2x2", 6, 7, Pool2dOptions{2, 2, 2, 2, 0, 0, false, true}, 3, 3},
      {"3x3_pad", 7, 7, Pool2dOptions{3, 3, 2, 2, 1, 1, false, true}, 4, 4},
      {"3x3_pad_exclude", 7, 7, Pool2dOptions{3, 3, 2, 2, 1, 1, false, false}, 4, 4},
      {"ceil_window_in_padding", 6, 6, Pool2dOptions{3, 3, 2, 2, 1, 1, true, true}, 4, 4},
      {"ceil_window_past_input", 5, 5, Pool2dOptions{2, 2, 2, 2, 1, 1, true, false}, 3, 3},
      {"ceil_clipped", 7, 8, Pool2dOptions{3, 3, 3, 3, 0, 0, true, true}, 3, 3},
      {"ceil_clipped_exclude", 7, 8, Pool2dOptions{3, 3, 3, 3, 0, 0, true, false}, 3, 3},
      {"rectangular", 5, 9, Pool2dOptions{2, 3, 1, 2, 1, 1, false, true}, 6, 5},
  };
}

// Window of output (oy, ox) as PyTorch defines it: [start, min(start + k, in + pad)) then clipped to the input.
HostTensor reference_pool(const HostTensor& x, const PoolShape& k, bool max) {
  const Pool2dOptions& o = k.o;
  HostTensor y({x.shape[0], x.shape[1], k.oh, k.ow});
  for (int64_t n = 0; n < x.shape[0]; ++n)
    for (int64_t c = 0; c < x.shape[1]; ++c)
      for (int64_t oy = 0; oy < k.oh; ++oy)
        for (int64_t ox = 0; ox < k.ow; ++ox) {
          const int64_t ys = oy * o.stride_h - o.pad_h, xs = ox * o.stride_w - o.pad_w;
          const int64_t ye = std::min(ys + o.kernel_h, k.h + o.pad_h), xe = std::min(xs + o.kernel_w, k.w + o.pad_w);
          const double with_pad = static_cast<double>((ye - ys) * (xe - xs));
          double best = -std::numeric_limits<double>::infinity(), sum = 0, count = 0;
          for (int64_t i = std::max<int64_t>(ys, 0); i < std::min(ye, k.h); ++i)
            for (int64_t j = std::max<int64_t>(xs, 0); j < std::min(xe, k.w); ++j) {
              const double v = x.at({n, c, i, j});
              best = std::max(best, v);
              sum += v;
              count += 1;
            }
          y.at({n, c, oy, ox}) = max ? best : sum / (o.count_include_pad ? with_pad : count);
        }
  return y;
}

// The op on x (made in the asked memory format); its output must come back in that format.
TV in_format(const Tensor& x, bool channels_last, const std::function<Tensor(const Tensor&)>& op) {
  EXPECT_EQ(is_channels_last(x), channels_last);
  Tensor y = op(x);
  if (y.dim() == 4) {
    EXPECT_EQ(is_channels_last(y), channels_last) << "pooling's output keeps the input's memory format";
  }
  return TV{y};
}

InputSpec format_in(InputSpec s, bool channels_last) { return channels_last ? in_channels_last(std::move(s)) : s; }
}  // namespace

std::vector<OpCase> pool_cases() {
  std::vector<OpCase> cs;
  for (bool cl : {false, true}) {
    const std::string format = cl ? "_channels_last" : "";
    for (const PoolShape& k : shapes())
      for (bool max : {true, false}) {
        const Pool2dOptions o = k.o;
        cs.push_back(make_case(
            std::string(max ? "max_pool2d_" : "avg_pool2d_") + k.name + format,
            {format_in(float_in({2, 3, k.h, k.w}), cl)},
            [o, max, cl](const TV& in, DType) {
              return in_format(in[0], cl, [&](const Tensor& x) { return max ? max_pool2d(x, o) : avg_pool2d(x, o); });
            },
            [k, max](const HV& in) { return HV{reference_pool(in[0], k, max)}; }));
        // A compare (max) or an add (average) per window element, windows clipped or not.
        const double window = static_cast<double>(o.kernel_h * o.kernel_w);
        cs.back().flops = [window](const std::vector<Shape>&, const std::vector<Shape>& out) {
          return window * shape_elements(out.at(0));
        };
        cs.back().batch_inputs = {0};
        cs.back().tol_f32 = 1e-6;  // at most 9 terms
        cs.back().tol_f64 = 1e-14;
      }
    cs.push_back(make_case(
        "global_avg_pool2d" + format, {format_in(float_in({3, 4, 5, 6}), cl)},
        [cl](const TV& in, DType) {
          return in_format(in[0], cl, [](const Tensor& x) { return global_avg_pool2d(x); });
        },
        [](const HV& in) {
          HostTensor y = ref::reduce(in[0], {2, 3}, false, 0.0, [](double a, double v) { return a + v; });
          return HV{ref::map(y, [](double s) { return s / 30.0; })};
        }));
    cs.back().flops = [](const std::vector<Shape>& in, const std::vector<Shape>&) { return shape_elements(in.at(0)); };
    cs.back().batch_inputs = {0};
    cs.back().tol_f64 = 1e-14;
  }
  return cs;
}

}  // namespace testing
}  // namespace tandem
