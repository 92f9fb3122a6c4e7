// batch_norm on the CPU: training and evaluation against an f64 reference, the running-statistics update,
// finite-difference gradients (affine or not, 4-D, 2-D and channels-last) and error paths.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "tests/nn/nn_test_util.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using testing::random_input;
using testing::values;

struct Stats {
  std::vector<double> mean, var;  // biased variance
};

// Per-channel batch statistics of row-major x [n, c, hw].
Stats batch_stats(const std::vector<double>& x, int64_t n, int64_t c, int64_t hw) {
  Stats s{std::vector<double>(c, 0.0), std::vector<double>(c, 0.0)};
  const double m = static_cast<double>(n * hw);
  for (int64_t ch = 0; ch < c; ++ch) {
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p) s.mean[ch] += x[(i * c + ch) * hw + p];
    s.mean[ch] /= m;
    for (int64_t i = 0; i < n; ++i)
      for (int64_t p = 0; p < hw; ++p) {
        double d = x[(i * c + ch) * hw + p] - s.mean[ch];
        s.var[ch] += d * d;
      }
    s.var[ch] /= m;
  }
  return s;
}

// (x - mean) / sqrt(var + eps) * w + b over row-major x [n, c, hw].
std::vector<double> normalize(const std::vector<double>& x, int64_t n, int64_t c, int64_t hw, const Stats& s,
                              const std::vector<double>& w, const std::vector<double>& b, double eps) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < n; ++i)
    for (int64_t ch = 0; ch < c; ++ch)
      for (int64_t p = 0; p < hw; ++p) {
        int64_t k = (i * c + ch) * hw + p;
        y[k] = (x[k] - s.mean[ch]) / std::sqrt(s.var[ch] + eps) * (w.empty() ? 1.0 : w[ch]) + (b.empty() ? 0.0 : b[ch]);
      }
  return y;
}

struct BnCase {
  Shape shape;
  bool channels_last;
};
std::vector<BnCase> bn_cases() { return {{{3, 4, 5, 6}, false}, {{3, 4, 5, 6}, true}, {{9, 5}, false}}; }

int64_t spatial(const Shape& s) { return s.size() == 4 ? s[2] * s[3] : 1; }

TEST(BatchNorm, TrainingForwardAndRunningStatisticsMatchReference) {
  for (DType dtype : {DType::F64, DType::F32})
    for (const BnCase& k : bn_cases())
      for (bool affine : {true, false}) {
        Generator gen(testing::fresh_seed());
        const int64_t n = k.shape[0], c = k.shape[1], hw = spatial(k.shape);
        Tensor x = add(mul(random_input(k.shape, gen, dtype), 2.0), 0.5);
        Tensor xin = k.channels_last ? to_channels_last(x) : x;
        Tensor w = affine ? random_input({c}, gen, dtype) : Tensor();
        Tensor b = affine ? random_input({c}, gen, dtype) : Tensor();
        Tensor rm = random_input({c}, gen, dtype), rv = add(rand({c}, gen, TensorOptions(dtype)), 0.5);
        std::vector<double> rm0 = values(rm), rv0 = values(rv);
        const double momentum = 0.3, eps = 1e-5;
        Tensor y = batch_norm(xin, w, b, rm, rv, true, momentum, eps);
        Stats s = batch_stats(values(x), n, c, hw);
        std::vector<double> ref = normalize(values(x), n, c, hw, s, affine ? values(w) : std::vector<double>{},
                                            affine ? values(b) : std::vector<double>{}, eps);
        const double tol = dtype == DType::F64 ? 1e-12 : 1e-5;
        testing::expect_close(y, from_vector(ref, k.shape).to(dtype), tol, "batch_norm output");
        EXPECT_EQ(is_channels_last(y), k.channels_last);
        std::vector<double> rm_ref(c), rv_ref(c);
        const double m = static_cast<double>(n * hw);
        for (int64_t ch = 0; ch < c; ++ch) {
          rm_ref[ch] = (1 - momentum) * rm0[ch] + momentum * s.mean[ch];
          rv_ref[ch] = (1 - momentum) * rv0[ch] + momentum * s.var[ch] * m / (m - 1);
        }
        testing::expect_close(rm, from_vector(rm_ref, {c}).to(dtype), tol, "running_mean");
        testing::expect_close(rv, from_vector(rv_ref, {c}).to(dtype), tol, "running_var");
      }
}

TEST(BatchNorm, EvaluationUsesRunningStatistics) {
  for (const BnCase& k : bn_cases())
    for (bool affine : {true, false}) {
      Generator gen(testing::fresh_seed());
      const int64_t n = k.shape[0], c = k.shape[1], hw = spatial(k.shape);
      Tensor x = random_input(k.shape, gen);
      Tensor w = affine ? random_input({c}, gen) : Tensor(), b = affine ? random_input({c}, gen) : Tensor();
      Tensor rm = random_input({c}, gen), rv = add(rand({c}, gen, TensorOptions(DType::F64)), 0.5);
      std::vector<double> rm0 = values(rm), rv0 = values(rv);
      Tensor y = batch_norm(k.channels_last ? to_channels_last(x) : x, w, b, rm, rv, false, 0.1, 1e-3);
      std::vector<double> ref = normalize(values(x), n, c, hw, Stats{rm0, rv0}, affine ? values(w) : std::vector<double>{},
                                          affine ? values(b) : std::vector<double>{}, 1e-3);
      testing::expect_close(y, from_vector(ref, k.shape), 1e-12, "eval output");
      EXPECT_EQ(values(rm), rm0);
      EXPECT_EQ(values(rv), rv0);
    }
}

TEST(BatchNorm, GradientsMatchFiniteDifferences) {
  for (const BnCase& k : bn_cases())
    for (bool training : {true, false})
      for (bool affine : {true, false}) {
        SCOPED_TRACE(shape_str(k.shape) + (k.channels_last ? " channels-last" : "") +
                     (training ? " training" : " eval") + (affine ? " affine" : ""));
        Generator gen(testing::fresh_seed());
        const int64_t c = k.shape[1];
        Tensor x = random_input(k.shape, gen);
        if (k.channels_last) x = to_channels_last(x);
        x.set_requires_grad();
        Tensor w = affine ? random_input({c}, gen).set_requires_grad() : Tensor();
        Tensor b = affine ? random_input({c}, gen).set_requires_grad() : Tensor();
        Tensor rm = random_input({c}, gen), rv = add(rand({c}, gen, TensorOptions(DType::F64)), 0.5);
        // Training passes no running statistics so that every evaluation of f is the same function.
        testing::expect_gradients_match(
            [&](const std::vector<Tensor>& in) {
              return training ? batch_norm(in[0], in[1], in[2], Tensor(), Tensor(), true, 0.1, 1e-5)
                              : batch_norm(in[0], in[1], in[2], rm, rv, false, 0.1, 1e-5);
            },
            {x, w, b});
      }
}

TEST(BatchNorm, RejectsBadArguments) {
  Generator gen(testing::fresh_seed());
  Tensor x = random_input({4, 3, 2, 2}, gen, DType::F32);
  Tensor v3 = random_input({3}, gen, DType::F32), rv = ones({3});
  EXPECT_THROW(batch_norm(x, random_input({4}, gen, DType::F32), v3, v3, rv, true, 0.1, 1e-5), ShapeError);
  EXPECT_THROW(batch_norm(x, v3.to(DType::F64), v3, v3, rv, true, 0.1, 1e-5), DTypeError);
  EXPECT_THROW(batch_norm(x, v3, v3, Tensor(), Tensor(), false, 0.1, 1e-5), ValueError);  // eval, no stats
  EXPECT_THROW(batch_norm(x, v3, v3, v3, Tensor(), true, 0.1, 1e-5), ValueError);         // half the stats
  EXPECT_THROW(batch_norm(random_input({1, 3}, gen, DType::F32), v3, v3, v3, rv, true, 0.1, 1e-5), ShapeError);
  EXPECT_THROW(batch_norm(x.flatten(2), v3, v3, v3, rv, true, 0.1, 1e-5), ShapeError);  // 3-D
  EXPECT_THROW(batch_norm(x.to(DType::I32), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5), DTypeError);
  EXPECT_THROW(batch_norm(x, v3, v3, v3, rv, true, 0.1, 0.0), ValueError);  // eps
}

}  // namespace
}  // namespace tandem
