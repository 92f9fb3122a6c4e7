// Layers: forward against double-precision loops, shape inference against the forward, initialization
// statistics, and finite-difference gradients (f64) of every layer.
#include <gtest/gtest.h>

#include <cmath>

#include "models/init.h"
#include "models/layers.h"
#include "models/sequential.h"
#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/harness/module_gradients.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

using tandem::testing::expect_module_gradients;
using tandem::testing::fresh_seed;

// Plain-loop convolution in double: x [N, C, H, W], w [O, C/g, k, k].
std::vector<double> conv_reference(const Tensor& x, const Tensor& w, const Tensor& b, const Conv2dSpec& s, Shape& out) {
  auto xv = x.to_vector<double>(), wv = w.to_vector<double>();
  std::vector<double> bv = b.defined() ? b.to_vector<double>() : std::vector<double>();
  int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3), O = s.out_channels, k = s.kernel;
  int64_t OH = window_output_size(H, k, s.stride, s.padding, s.dilation);
  int64_t OW = window_output_size(W, k, s.stride, s.padding, s.dilation);
  int64_t cpg = C / s.groups, opg = O / s.groups;
  out = {N, O, OH, OW};
  std::vector<double> y(static_cast<size_t>(N * O * OH * OW));
  for (int64_t n = 0; n < N; ++n)
    for (int64_t o = 0; o < O; ++o)
      for (int64_t oh = 0; oh < OH; ++oh)
        for (int64_t ow = 0; ow < OW; ++ow) {
          double acc = bv.empty() ? 0.0 : bv[o];
          int64_t g = o / opg;
          for (int64_t c = 0; c < cpg; ++c)
            for (int64_t i = 0; i < k; ++i)
              for (int64_t j = 0; j < k; ++j) {
                int64_t ih = oh * s.stride - s.padding + i * s.dilation;
                int64_t iw = ow * s.stride - s.padding + j * s.dilation;
                if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
                acc += xv[((n * C + g * cpg + c) * H + ih) * W + iw] * wv[((o * cpg + c) * k + i) * k + j];
              }
          y[((n * O + o) * OH + oh) * OW + ow] = acc;
        }
  return y;
}

const Conv2dSpec kConvCases[] = {
    Conv2dSpec{3, 4, 3, 1, 1, 1, 1, false},  // plain "same"
    Conv2dSpec{4, 6, 3, 2, 1, 1, 1, true},   // strided, bias
    Conv2dSpec{2, 3, 3, 1, 2, 2, 1, false},  // dilated
    Conv2dSpec{4, 6, 1, 1, 0, 1, 2, true},   // grouped 1x1
    Conv2dSpec{4, 4, 5, 2, 2, 1, 4, false},  // depthwise 5x5 stride 2
    Conv2dSpec{3, 5, 7, 2, 3, 1, 1, false},  // ImageNet-stem-like
};

TEST(Conv2d, MatchesReferenceAndShape) {
  for (const Conv2dSpec& s : kConvCases) {
    Generator gen(fresh_seed());
    Conv2d conv(s, gen);
    Tensor x = randn({2, s.in_channels, 9, 8}, gen);
    Shape ref_shape;
    std::vector<double> ref = conv_reference(x, conv.weight, conv.bias, s, ref_shape);
    Tensor y = conv.forward(x);
    EXPECT_EQ(y.shape(), ref_shape) << conv.describe();
    EXPECT_EQ(conv.output_shape(x.shape()), ref_shape) << conv.describe();
    tandem::testing::expect_close(y, from_vector<double>(ref, ref_shape).to(DType::F32), 1e-5, conv.describe());
    EXPECT_EQ(conv.is_depthwise(), s.groups == s.in_channels && s.groups > 1);
  }
}

TEST(Conv2d, Gradients) {
  for (const Conv2dSpec& s : kConvCases) {
    Generator gen(fresh_seed());
    Conv2d conv(s, gen);
    conv.to(DType::F64);
    expect_module_gradients(conv, randn({2, s.in_channels, 7, 6}, gen), fresh_seed());
  }
}

TEST(Conv2d, RefusesBadSpecsAndInputs) {
  Generator gen(fresh_seed());
  EXPECT_THROW(Conv2d(Conv2dSpec{3, 4, 3, 1, 1, 1, 2, false}, gen), ValueError);  // groups do not divide 3
  EXPECT_THROW(Conv2d(Conv2dSpec{0, 4, 3, 1, 1, 1, 1, false}, gen), ValueError);
  Conv2d conv(Conv2dSpec{3, 4, 5, 1, 0, 1, 1, false}, gen);
  EXPECT_THROW(conv.output_shape({1, 3, 4, 4}), ShapeError);  // smaller than the kernel
  EXPECT_THROW(conv.output_shape({1, 2, 8, 8}), ShapeError);
}

TEST(Init, DefaultAndKaimingStatistics) {
  Generator gen(fresh_seed());
  Conv2d conv(Conv2dSpec{64, 64, 3, 1, 1, 1, 1, true}, gen);
  double bound = 1.0 / std::sqrt(64.0 * 9.0);
  // The weights are float32: a draw just under the bound may round to float(bound), which lies above it.
  const double bound_f32 = static_cast<float>(bound);
  auto w = conv.weight.to_vector<double>();
  double mx = 0, sq = 0;
  for (double v : w) {
    mx = std::max(mx, std::abs(v));
    sq += v * v;
  }
  EXPECT_LE(mx, bound_f32);
  EXPECT_GT(mx, 0.99 * bound);
  EXPECT_NEAR(std::sqrt(sq / w.size()), bound / std::sqrt(3.0), 0.02 * bound);  // uniform's std
  for (double v : conv.bias.to_vector<double>()) EXPECT_LE(std::abs(v), bound_f32);
  init::kaiming_normal_fan_out(conv.weight, gen);
  w = conv.weight.to_vector<double>();
  double mean = 0;
  sq = 0;
  for (double v : w) mean += v / w.size();
  for (double v : w) sq += (v - mean) * (v - mean) / w.size();
  double expected = std::sqrt(2.0 / (64 * 9));
  EXPECT_NEAR(std::sqrt(sq), expected, 0.02 * expected);
  EXPECT_NEAR(mean, 0.0, 0.03 * expected);
  EXPECT_EQ(init::fan_out(conv.weight), 64 * 9);
  EXPECT_EQ(init::fan_in(Tensor(zeros({8, 2, 3, 3}))), 18);
}

TEST(Init, SameSeedSameWeights) {
  Generator a(42), b(42);
  Conv2d c1(kConvCases[1], a), c2(kConvCases[1], b);
  tandem::testing::expect_bitwise_equal(c1.weight, c2.weight, "weight");
  tandem::testing::expect_bitwise_equal(c1.bias, c2.bias, "bias");
}

// Batch statistics per channel in double: mean and biased variance over (N, H, W).
void channel_stats(const Tensor& x, std::vector<double>& mean, std::vector<double>& var) {
  auto v = x.to_vector<double>();
  int64_t N = x.size(0), C = x.size(1), HW = x.numel() / (N * C);
  mean.assign(C, 0);
  var.assign(C, 0);
  for (int64_t c = 0; c < C; ++c) {
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) mean[c] += v[(n * C + c) * HW + i];
    mean[c] /= N * HW;
    for (int64_t n = 0; n < N; ++n)
      for (int64_t i = 0; i < HW; ++i) var[c] += std::pow(v[(n * C + c) * HW + i] - mean[c], 2);
    var[c] /= N * HW;
  }
}

TEST(BatchNorm2d, TrainAndEvalMatchReference) {
  Generator gen(fresh_seed());
  BatchNormSpec bs;
  bs.momentum = 0.3;
  bs.eps = 1e-3;
  BatchNorm2d bn(3, bs);
  {
    autograd::NoGradGuard ng;
    normal_(bn.weight, 1.0, 0.5, gen);
    normal_(bn.bias, 0.0, 0.5, gen);
  }
  Tensor x = randn({4, 3, 5, 6}, gen) * 2.0 + 0.5;
  std::vector<double> mean, var;
  channel_stats(x, mean, var);
  auto wv = bn.weight.to_vector<double>(), bv = bn.bias.to_vector<double>(), xv = x.to_vector<double>();
  std::vector<double> ref(xv.size());
  int64_t HW = 30, n_red = 4 * HW;
  for (size_t i = 0; i < xv.size(); ++i) {
    int64_t c = (static_cast<int64_t>(i) / HW) % 3;
    ref[i] = (xv[i] - mean[c]) / std::sqrt(var[c] + bs.eps) * wv[c] + bv[c];
  }
  Tensor y = bn.forward(x);
  tandem::testing::expect_close(y, from_vector<double>(ref, x.shape()).to(DType::F32), 1e-5, "train output");
  std::vector<double> rm(3), rv(3);
  for (int c = 0; c < 3; ++c) {
    rm[c] = 0.7 * 0.0 + 0.3 * mean[c];
    rv[c] = 0.7 * 1.0 + 0.3 * var[c] * n_red / (n_red - 1);  // unbiased, as PyTorch
  }
  tandem::testing::expect_close(bn.running_mean, from_vector<double>(rm, {3}).to(DType::F32), 1e-5, "running_mean");
  tandem::testing::expect_close(bn.running_var, from_vector<double>(rv, {3}).to(DType::F32), 1e-5, "running_var");
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 1);
  bn.eval();
  Tensor ye = bn.forward(x);
  for (size_t i = 0; i < xv.size(); ++i) {
    int64_t c = (static_cast<int64_t>(i) / HW) % 3;
    ref[i] = (xv[i] - rm[c]) / std::sqrt(rv[c] + bs.eps) * wv[c] + bv[c];
  }
  tandem::testing::expect_close(ye, from_vector<double>(ref, x.shape()).to(DType::F32), 1e-5, "eval output");
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), 1);
  EXPECT_EQ(bn.output_shape({2, 3, 4, 4}), (Shape{2, 3, 4, 4}));
  EXPECT_THROW(bn.output_shape({2, 4, 4, 4}), ShapeError);
}

// num_batches_tracked counts on the host: training steps leave the buffer alone (no write, so no kernel on a GPU)
// and every way of reading it sees the count, a module moved to another dtype or device included.
TEST(BatchNorm2d, CountsOnTheHostUntilRead) {
  Generator gen(fresh_seed());
  BatchNorm2d bn(3);
  const Tensor buffer = bn.num_batches_tracked();
  const uint64_t version = buffer.storage().version();
  const int steps = 2 + static_cast<int>(gen.integer(5));
  for (int i = 0; i < steps; ++i) bn.forward(randn({4, 3, 2, 2}, gen));
  EXPECT_EQ(buffer.storage().version(), version) << "a step wrote the buffer";
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), steps);
  EXPECT_EQ(buffer.item<int64_t>(), steps);  // the same buffer, written once
  bn.forward(randn({4, 3, 2, 2}, gen));
  EXPECT_EQ(bn.state_dict().back().first, "num_batches_tracked");
  EXPECT_EQ(bn.state_dict().back().second.item<int64_t>(), steps + 1);
  bn.forward(randn({4, 3, 2, 2}, gen));
  EXPECT_EQ(bn.named_buffers().back().second.item<int64_t>(), steps + 2);
  bn.forward(randn({4, 3, 2, 2}, gen));
  bn.to(DType::F64);
  EXPECT_EQ(bn.num_batches_tracked().dtype(), DType::I64);
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), steps + 3);
  bn.eval();
  bn.forward(randn({4, 3, 2, 2}, gen).to(DType::F64));
  EXPECT_EQ(bn.num_batches_tracked().item<int64_t>(), steps + 3) << "evaluation does not count";
}

TEST(BatchNorm2d, Gradients) {
  Generator gen(fresh_seed());
  for (bool affine : {true, false})
    for (bool training : {true, false}) {
      BatchNormSpec bs;
      bs.affine = affine;
      BatchNorm2d bn(3, bs);
      bn.to(DType::F64);
      if (affine) {
        autograd::NoGradGuard ng;
        normal_(bn.weight, 1.0, 0.5, gen);
      }
      bn.train(training);
      expect_module_gradients(bn, randn({3, 3, 2, 3}, gen), fresh_seed());
    }
}

TEST(Linear, MatchesReferenceAndGradients) {
  Generator gen(fresh_seed());
  Linear lin(5, 3, true, gen);
  Tensor x = randn({4, 5}, gen);
  auto xv = x.to_vector<double>(), wv = lin.weight.to_vector<double>(), bv = lin.bias.to_vector<double>();
  std::vector<double> ref(12);
  for (int n = 0; n < 4; ++n)
    for (int o = 0; o < 3; ++o) {
      ref[n * 3 + o] = bv[o];
      for (int i = 0; i < 5; ++i) ref[n * 3 + o] += xv[n * 5 + i] * wv[o * 5 + i];
    }
  tandem::testing::expect_close(lin.forward(x), from_vector<double>(ref, {4, 3}).to(DType::F32), 1e-5, "linear");
  EXPECT_EQ(lin.output_shape({7, 5}), (Shape{7, 3}));
  EXPECT_THROW(lin.output_shape({7, 4}), ShapeError);
  for (double v : lin.weight.to_vector<double>()) EXPECT_LE(std::abs(v), 1 / std::sqrt(5.0));
  lin.to(DType::F64);
  expect_module_gradients(lin, randn({4, 5}, gen), fresh_seed());
  Linear nobias(5, 2, false, gen);
  EXPECT_EQ(nobias.named_parameters().size(), 1u);
  nobias.to(DType::F64);
  expect_module_gradients(nobias, randn({3, 5}, gen), fresh_seed());
}

// Windows in double: max or average (count_include_pad) of x [N, C, H, W].
std::vector<double> pool_reference(const Tensor& x, int64_t k, int64_t s, int64_t p, bool max, Shape& out) {
  auto xv = x.to_vector<double>();
  int64_t N = x.size(0), C = x.size(1), H = x.size(2), W = x.size(3);
  int64_t OH = window_output_size(H, k, s, p, 1), OW = window_output_size(W, k, s, p, 1);
  out = {N, C, OH, OW};
  std::vector<double> y;
  for (int64_t nc = 0; nc < N * C; ++nc)
    for (int64_t oh = 0; oh < OH; ++oh)
      for (int64_t ow = 0; ow < OW; ++ow) {
        double acc = max ? -INFINITY : 0;
        for (int64_t i = 0; i < k; ++i)
          for (int64_t j = 0; j < k; ++j) {
            int64_t ih = oh * s - p + i, iw = ow * s - p + j;
            if (ih < 0 || ih >= H || iw < 0 || iw >= W) continue;
            double v = xv[(nc * H + ih) * W + iw];
            acc = max ? std::max(acc, v) : acc + v;
          }
        y.push_back(max ? acc : acc / (k * k));
      }
  return y;
}

TEST(Pooling, MatchReferenceAndShapes) {
  Generator gen(fresh_seed());
  Tensor x = randn({2, 3, 7, 6}, gen);
  for (auto kps : {std::vector<int64_t>{3, 2, 1}, {2, 2, 0}, {3, 1, 1}}) {
    Shape s;
    MaxPool2d mp(kps[0], kps[1], kps[2]);
    std::vector<double> ref = pool_reference(x, kps[0], kps[1], kps[2], true, s);
    tandem::testing::expect_close(mp.forward(x), from_vector<double>(ref, s).to(DType::F32), 1e-6, mp.describe());
    EXPECT_EQ(mp.output_shape(x.shape()), s);
    AvgPool2d ap(kps[0], kps[1], kps[2]);
    ref = pool_reference(x, kps[0], kps[1], kps[2], false, s);
    tandem::testing::expect_close(ap.forward(x), from_vector<double>(ref, s).to(DType::F32), 1e-5, ap.describe());
    EXPECT_EQ(ap.output_shape(x.shape()), s);
  }
  MaxPool2d ceil_pool(2, 2, 0, true);
  EXPECT_EQ(ceil_pool.output_shape({1, 1, 7, 7}), (Shape{1, 1, 4, 4}));
  EXPECT_EQ(ceil_pool.forward(randn({1, 1, 7, 7}, gen)).shape(), (Shape{1, 1, 4, 4}));
  GlobalAvgPool gap;
  auto xv = x.to_vector<double>();
  std::vector<double> ref(6, 0.0);
  for (size_t i = 0; i < xv.size(); ++i) ref[i / 42] += xv[i] / 42;
  tandem::testing::expect_close(gap.forward(x), from_vector<double>(ref, {2, 3}).to(DType::F32), 1e-6, "gap");
  EXPECT_EQ(gap.output_shape(x.shape()), (Shape{2, 3}));
  AdaptiveAvgPoolFlatten adaptive(2);
  Tensor x4 = randn({1, 2, 4, 6}, gen);
  EXPECT_EQ(adaptive.output_shape(x4.shape()), (Shape{1, 8}));
  auto v4 = x4.to_vector<double>();
  std::vector<double> ref4(8, 0.0);
  for (int c = 0; c < 2; ++c)
    for (int h = 0; h < 4; ++h)
      for (int w = 0; w < 6; ++w) ref4[c * 4 + (h / 2) * 2 + w / 3] += v4[(c * 4 + h) * 6 + w] / 6;
  tandem::testing::expect_close(adaptive.forward(x4), from_vector<double>(ref4, {1, 8}).to(DType::F32), 1e-6,
                                "adaptive");
  EXPECT_THROW(adaptive.output_shape({1, 2, 5, 6}), ShapeError);
  EXPECT_THROW(MaxPool2d(2, 2, 2), ValueError);  // padding above half the kernel
}

TEST(Pooling, Gradients) {
  Generator gen(fresh_seed());
  MaxPool2d mp(3, 2, 1);
  expect_module_gradients(mp, randn({2, 2, 5, 5}, gen), fresh_seed());
  AvgPool2d ap(3, 2, 1);
  expect_module_gradients(ap, randn({2, 2, 5, 5}, gen), fresh_seed());
  GlobalAvgPool gap;
  expect_module_gradients(gap, randn({2, 3, 3, 2}, gen), fresh_seed());
  AdaptiveAvgPoolFlatten adaptive(2);
  expect_module_gradients(adaptive, randn({1, 2, 4, 4}, gen), fresh_seed());
}

TEST(Activations, MatchAndGradients) {
  Generator gen(fresh_seed());
  Tensor x = randn({3, 4}, gen) * 4.0;
  ReLU r;
  ReLU6 r6;
  auto xv = x.to_vector<float>();
  auto yr = r.forward(x).to_vector<float>(), y6 = r6.forward(x).to_vector<float>();
  for (size_t i = 0; i < xv.size(); ++i) {
    EXPECT_EQ(yr[i], std::max(0.0f, xv[i]));
    EXPECT_EQ(y6[i], std::min(6.0f, std::max(0.0f, xv[i])));
  }
  expect_module_gradients(r, randn({3, 4}, gen), fresh_seed());
  expect_module_gradients(r6, randn({3, 4}, gen) * 4.0, fresh_seed());
  Identity id;
  Flatten fl;
  EXPECT_EQ(fl.output_shape({2, 3, 4, 5}), (Shape{2, 60}));
  EXPECT_EQ(fl.forward(randn({2, 3, 4, 5}, gen)).shape(), (Shape{2, 60}));
  expect_module_gradients(id, randn({2, 3}, gen), fresh_seed());
  expect_module_gradients(fl, randn({2, 3, 2, 2}, gen), fresh_seed());
}

TEST(Dropout, ScalesKeptValuesAndRepeatsWithItsGenerator) {
  Generator gen(fresh_seed());
  Dropout d(0.25, fresh_seed());
  Tensor x = ones({100, 100});
  auto y = d.forward(x).to_vector<float>();
  int64_t zeros_seen = 0;
  for (float v : y) {
    if (v == 0)
      ++zeros_seen;
    else
      EXPECT_FLOAT_EQ(v, 1.0f / 0.75f);
  }
  EXPECT_NEAR(zeros_seen / 10000.0, 0.25, 0.03);
  d.eval();
  tandem::testing::expect_bitwise_equal(d.forward(x), x, "dropout in eval");
  d.train();
  EXPECT_THROW(Dropout(1.0, 0), ValueError);
  expect_module_gradients(d, randn({4, 5}, gen), fresh_seed());
}

TEST(Residual, AddsTheShortcut) {
  Generator gen(fresh_seed());
  auto body = std::make_shared<Conv2d>(Conv2dSpec{3, 3, 3, 1, 1, 1, 1, false}, gen);
  Residual res(body, nullptr, true);
  Tensor x = randn({2, 3, 4, 4}, gen);
  Tensor expected = relu(add(body->forward(x), x));
  tandem::testing::expect_bitwise_equal(res.forward(x), expected, "residual");
  auto proj = std::make_shared<Conv2d>(Conv2dSpec{3, 5, 1, 2, 0, 1, 1, false}, gen);
  Residual bad(std::make_shared<Conv2d>(Conv2dSpec{3, 5, 3, 1, 1, 1, 1, false}, gen), proj);
  EXPECT_THROW(bad.output_shape({2, 3, 4, 4}), ShapeError);
  Residual good(std::make_shared<Conv2d>(Conv2dSpec{3, 5, 3, 2, 1, 1, 1, false}, gen), proj);
  EXPECT_EQ(good.output_shape({2, 3, 4, 4}), (Shape{2, 5, 2, 2}));
  good.to(DType::F64);
  expect_module_gradients(good, randn({2, 3, 4, 4}, gen), fresh_seed());
  res.to(DType::F64);
  expect_module_gradients(res, randn({2, 3, 4, 4}, gen), fresh_seed());
}

TEST(Sequential, ChainsAndDifferentiates) {
  Generator gen(fresh_seed());
  Sequential seq;
  seq.add(std::make_shared<Conv2d>(Conv2dSpec{2, 4, 3, 2, 1, 1, 1, false}, gen));
  seq.add(std::make_shared<BatchNorm2d>(4));
  seq.add(std::make_shared<ReLU6>());
  seq.add(std::make_shared<GlobalAvgPool>());
  seq.add("head", std::make_shared<Linear>(4, 3, true, gen));
  Tensor x = randn({3, 2, 6, 6}, gen);
  EXPECT_EQ(seq.forward(x).shape(), seq.output_shape(x.shape()));
  EXPECT_EQ(seq.name_at(4), "head");
  seq.to(DType::F64);
  expect_module_gradients(seq, x, fresh_seed());
}

}  // namespace
}  // namespace models
}  // namespace tandem
