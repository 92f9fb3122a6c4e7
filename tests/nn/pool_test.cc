// Pooling on the CPU: max/avg forward against an f64 reference (padding, ceil_mode, count_include_pad,
// both memory formats), output sizes, finite-difference gradients, global average pooling and error paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "tests/nn/nn_test_util.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using testing::random_input;
using testing::values;

struct PoolCase {
  int64_t h, w;
  Pool2dOptions o;
  int64_t oh, ow;  // expected output size (worked out by hand from PyTorch's rule)
};

Pool2dOptions pool(int64_t kh, int64_t kw, int64_t sh, int64_t sw, int64_t ph, int64_t pw, bool ceil, bool include) {
  Pool2dOptions o;
  o.kernel_h = kh;
  o.kernel_w = kw;
  o.stride_h = sh;
  o.stride_w = sw;
  o.pad_h = ph;
  o.pad_w = pw;
  o.ceil_mode = ceil;
  o.count_include_pad = include;
  return o;
}

std::vector<PoolCase> pool_cases() {
  return {
      {6, 7, pool(2, 2, 2, 2, 0, 0, false, true), 3, 3},
      {7, 7, pool(3, 3, 2, 2, 1, 1, false, true), 4, 4},
      {7, 7, pool(3, 3, 2, 2, 1, 1, false, false), 4, 4},
      {6, 6, pool(3, 3, 2, 2, 1, 1, true, true), 4, 4},   // ceil adds a window starting in the padding
      {5, 5, pool(2, 2, 2, 2, 1, 1, true, false), 3, 3},  // ceil's extra window would start past the input
      {7, 8, pool(3, 3, 3, 3, 0, 0, true, true), 3, 3},   // ceil windows clipped by the input's end
      {7, 8, pool(3, 3, 3, 3, 0, 0, true, false), 3, 3},
      {5, 9, pool(2, 3, 1, 2, 1, 1, false, true), 6, 5},  // rectangular
  };
}

// Window of output (oy, ox) as PyTorch defines it: [start, min(start + k, in + pad)) then clipped to the input.
struct Ref {
  std::vector<double> max, avg;
};
Ref reference_pool(const std::vector<double>& x, int64_t planes, const PoolCase& k) {
  const Pool2dOptions& o = k.o;
  Ref r{std::vector<double>(planes * k.oh * k.ow), std::vector<double>(planes * k.oh * k.ow)};
  for (int64_t p = 0; p < planes; ++p)
    for (int64_t oy = 0; oy < k.oh; ++oy)
      for (int64_t ox = 0; ox < k.ow; ++ox) {
        int64_t ys = oy * o.stride_h - o.pad_h, xs = ox * o.stride_w - o.pad_w;
        int64_t ye = std::min(ys + o.kernel_h, k.h + o.pad_h), xe = std::min(xs + o.kernel_w, k.w + o.pad_w);
        double with_pad = static_cast<double>((ye - ys) * (xe - xs));
        double best = -std::numeric_limits<double>::infinity(), sum = 0, count = 0;
        for (int64_t i = std::max<int64_t>(ys, 0); i < std::min(ye, k.h); ++i)
          for (int64_t j = std::max<int64_t>(xs, 0); j < std::min(xe, k.w); ++j) {
            double v = x[(p * k.h + i) * k.w + j];
            best = std::max(best, v);
            sum += v;
            count += 1;
          }
        r.max[(p * k.oh + oy) * k.ow + ox] = best;
        r.avg[(p * k.oh + oy) * k.ow + ox] = sum / (o.count_include_pad ? with_pad : count);
      }
  return r;
}

TEST(Pool2d, ForwardMatchesReference) {
  for (DType dtype : {DType::F64, DType::F32})
    for (bool cl : {false, true})
      for (const PoolCase& k : pool_cases()) {
        SCOPED_TRACE(std::to_string(k.h) + "x" + std::to_string(k.w) + " kernel " + std::to_string(k.o.kernel_h) +
                     " ceil " + std::to_string(k.o.ceil_mode) + (cl ? " channels-last" : ""));
        Generator gen(testing::fresh_seed());
        Tensor x = random_input({2, 3, k.h, k.w}, gen, dtype);
        Tensor xin = cl ? to_channels_last(x) : x;
        Ref ref = reference_pool(values(x), 6, k);
        Tensor ym = max_pool2d(xin, k.o), ya = avg_pool2d(xin, k.o);
        ASSERT_EQ(ym.shape(), (Shape{2, 3, k.oh, k.ow}));
        ASSERT_EQ(ya.shape(), (Shape{2, 3, k.oh, k.ow}));
        EXPECT_EQ(is_channels_last(ym), cl);
        EXPECT_EQ(is_channels_last(ya), cl);
        double tol = dtype == DType::F64 ? 1e-14 : 1e-6;
        testing::expect_close(ym, from_vector(ref.max, ym.shape()), tol, "max_pool2d");
        testing::expect_close(ya, from_vector(ref.avg, ya.shape()), tol, "avg_pool2d");
      }
}

TEST(Pool2d, GradientsMatchFiniteDifferences) {
  for (bool cl : {false, true})
    for (const PoolCase& k : pool_cases()) {
      SCOPED_TRACE(std::to_string(k.h) + "x" + std::to_string(k.w) + " kernel " + std::to_string(k.o.kernel_h) +
                   " ceil " + std::to_string(k.o.ceil_mode) + (cl ? " channels-last" : ""));
      Generator gen(testing::fresh_seed());
      Tensor x = random_input({2, 2, k.h, k.w}, gen);
      if (cl) x = to_channels_last(x);
      x.set_requires_grad();
      Pool2dOptions o = k.o;
      testing::expect_gradients_match([o](const std::vector<Tensor>& in) { return max_pool2d(in[0], o); }, {x});
      testing::expect_gradients_match([o](const std::vector<Tensor>& in) { return avg_pool2d(in[0], o); }, {x});
    }
}

TEST(Pool2d, MaxPoolPropagatesNaN) {
  std::vector<double> v = {1.0, std::nan(""), 3.0, 2.0};
  Tensor y = max_pool2d(from_vector(v, {1, 1, 2, 2}), pool(2, 2, 2, 2, 0, 0, false, true));
  EXPECT_TRUE(std::isnan(y.item<double>()));
}

TEST(Pool2d, MaxPoolTiesGoToTheFirstMaximum) {
  Tensor x = ones({1, 1, 3, 3}, DType::F64).set_requires_grad();
  Tensor y = max_pool2d(x, pool(2, 2, 1, 1, 0, 0, false, true));  // four overlapping windows of equal values
  sum(y).backward();
  EXPECT_EQ(values(x.grad()), (std::vector<double>{1, 1, 0, 1, 1, 0, 0, 0, 0}));
}

TEST(GlobalAvgPool2d, MatchesMeanAndGradients) {
  for (bool cl : {false, true}) {
    Generator gen(testing::fresh_seed());
    Tensor x = random_input({3, 4, 5, 6}, gen);
    Tensor y = global_avg_pool2d(cl ? to_channels_last(x) : x);
    ASSERT_EQ(y.shape(), (Shape{3, 4}));
    std::vector<double> xv = values(x), ref(12, 0.0);
    for (int64_t p = 0; p < 12; ++p) {
      for (int64_t i = 0; i < 30; ++i) ref[p] += xv[p * 30 + i];
      ref[p] /= 30.0;
    }
    testing::expect_close(y, from_vector(ref, {3, 4}), 1e-14, "global_avg_pool2d");
    Tensor xg = (cl ? to_channels_last(x) : x).detach().set_requires_grad();
    testing::expect_gradients_match([](const std::vector<Tensor>& in) { return global_avg_pool2d(in[0]); }, {xg});
  }
}

TEST(Pool2d, RejectsBadArguments) {
  Generator gen(testing::fresh_seed());
  Tensor x = random_input({1, 2, 5, 5}, gen, DType::F32);
  EXPECT_THROW(max_pool2d(x, pool(2, 2, 2, 2, 2, 0, false, true)), ValueError);  // padding > kernel / 2
  EXPECT_THROW(avg_pool2d(x, pool(2, 2, 0, 1, 0, 0, false, true)), ValueError);  // stride 0
  EXPECT_THROW(max_pool2d(x, pool(0, 2, 1, 1, 0, 0, false, true)), ValueError);  // empty kernel
  EXPECT_THROW(max_pool2d(x, pool(6, 2, 1, 1, 0, 0, false, true)), ShapeError);  // kernel over the input
  EXPECT_THROW(max_pool2d(x.flatten(2), pool(2, 2, 2, 2, 0, 0, false, true)), ShapeError);
  EXPECT_THROW(avg_pool2d(x.to(DType::I64), pool(2, 2, 2, 2, 0, 0, false, true)), DTypeError);
  EXPECT_THROW(global_avg_pool2d(x.flatten(2)), ShapeError);
}

}  // namespace
}  // namespace tandem
