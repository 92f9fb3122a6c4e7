// The CPU's vectorized f32 NCHW batch norm (kernels/cpu/nn/batch_norm_f32.cc) against a plain f64 computation of
// the textbook formulas, on fresh random shapes (planes shorter and longer than a vector, ragged tails) and
// values with an offset mean, with batch_norm_act's residual add and ReLU6 fused; the same bits for any thread count;
// off with the fast kernels switched off.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <vector>

#include "kernels/cpu/nn/batch_norm_f32.h"
#include "runtime/base/config.h"
#include "runtime/base/parallel_for.h"
#include "tests/testing.h"

namespace tandem {
namespace {

struct Case {
  BatchNormGeometry g;
  std::vector<float> x, dy, w, b, rmean, rvar;
};

Case random_case(std::mt19937_64& rng) {
  Case k;
  const int64_t hws[] = {1, 3, 8, 13, 64, 100};
  k.g.n = 2 + static_cast<int64_t>(rng() % 3);  // at least 2 values per channel: an unbiased variance
  k.g.c = 1 + static_cast<int64_t>(rng() % 20);
  k.g.hw = hws[rng() % 6];
  const size_t count = static_cast<size_t>(k.g.n * k.g.c * k.g.hw);
  std::normal_distribution<float> normal;
  std::uniform_real_distribution<float> offset(-4, 4), positive(0.5f, 2.f);
  const float shift = offset(rng);  // a mean far from 0: centering matters
  for (size_t i = 0; i < count; ++i) k.x.push_back(shift + normal(rng));
  for (size_t i = 0; i < count; ++i) k.dy.push_back(normal(rng));
  for (int64_t c = 0; c < k.g.c; ++c) {
    k.w.push_back(positive(rng));
    k.b.push_back(normal(rng));
    k.rmean.push_back(normal(rng));
    k.rvar.push_back(positive(rng));
  }
  return k;
}

// Element (i, c, p) of an NCHW buffer.
size_t at(const BatchNormGeometry& g, int64_t i, int64_t c, int64_t p) {
  return static_cast<size_t>((i * g.c + c) * g.hw + p);
}

void expect_near_rel(double got, double want, double tol, const char* what) {
  EXPECT_LE(std::fabs(got - want), tol * (1.0 + std::fabs(want))) << what << ": " << got << " vs " << want;
}

TEST(CpuBatchNormF32, TrainingForwardAndBackwardMatchF64Formulas) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 30; ++trial) {
    Case k = random_case(rng);
    const BatchNormGeometry& g = k.g;
    const double eps = 1e-5, momentum = 0.1, m = static_cast<double>(g.n * g.hw);
    std::vector<float> y(k.x.size()), mean(g.c), invstd(g.c), rmean = k.rmean, rvar = k.rvar;
    ASSERT_TRUE(cpu::batch_norm_f32_forward_train(g, k.x.data(), k.w.data(), k.b.data(), eps, momentum, rmean.data(),
                                                  rvar.data(), y.data(), mean.data(), invstd.data()));
    std::vector<float> dx(k.x.size()), dw(g.c), db(g.c);
    ASSERT_TRUE(cpu::batch_norm_f32_backward(g, true, k.x.data(), k.dy.data(), k.w.data(), mean.data(), invstd.data(),
                                             dx.data(), dw.data(), db.data()));
    for (int64_t c = 0; c < g.c; ++c) {
      double mu = 0, var = 0;
      for (int64_t i = 0; i < g.n; ++i)
        for (int64_t p = 0; p < g.hw; ++p) mu += k.x[at(g, i, c, p)];
      mu /= m;
      for (int64_t i = 0; i < g.n; ++i)
        for (int64_t p = 0; p < g.hw; ++p) var += std::pow(k.x[at(g, i, c, p)] - mu, 2);
      var /= m;
      const double is = 1.0 / std::sqrt(var + eps);
      expect_near_rel(mean[c], mu, 1e-6, "mean");
      expect_near_rel(invstd[c], is, 1e-5, "invstd");
      expect_near_rel(rmean[c], 0.9 * k.rmean[c] + 0.1 * mu, 1e-6, "running mean");
      expect_near_rel(rvar[c], 0.9 * k.rvar[c] + 0.1 * var * m / (m - 1.0), 1e-5, "running var");
      // Gradients of y = xhat w + b (xhat = (x - mean) is) with the batch statistics differentiated:
      // dx = w is / m (m dy - Σ dy - xhat Σ dy xhat), dw = Σ dy xhat, db = Σ dy; mean and is are the backward's
      // inputs, the f32 statistics the forward saved (checked above).
      const double smu = mean[c], sis = invstd[c];
      double sdy = 0, sdyx = 0;
      for (int64_t i = 0; i < g.n; ++i)
        for (int64_t p = 0; p < g.hw; ++p) {
          const size_t j = at(g, i, c, p);
          sdy += k.dy[j];
          sdyx += k.dy[j] * (k.x[j] - smu) * sis;
        }
      expect_near_rel(db[c], sdy, 1e-5, "dbias");
      expect_near_rel(dw[c], sdyx, 1e-5, "dweight");
      for (int64_t i = 0; i < g.n; ++i)
        for (int64_t p = 0; p < g.hw; ++p) {
          const size_t j = at(g, i, c, p);
          expect_near_rel(y[j], (k.x[j] - mu) * is * k.w[c] + k.b[c], 1e-5, "y");
          // dx is a difference of terms that may nearly cancel (m = 2 leaves it 0): the bound scales with them.
          const double xhat = (k.x[j] - smu) * sis;
          const double terms = k.w[c] * sis / m * (m * std::fabs(k.dy[j]) + std::fabs(sdy) + std::fabs(xhat * sdyx));
          EXPECT_LE(std::fabs(dx[j] - k.w[c] * sis / m * (m * k.dy[j] - sdy - xhat * sdyx)), 1e-6 * (1 + terms))
              << "dx";
        }
    }
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "shape n=" << g.n << " c=" << g.c << " hw=" << g.hw;
      return;
    }
  }
}

TEST(CpuBatchNormF32, EvaluationForwardAndBackwardMatchF64Formulas) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 30; ++trial) {
    Case k = random_case(rng);
    const BatchNormGeometry& g = k.g;
    const double eps = 1e-3;
    std::vector<float> y(k.x.size()), invstd(g.c);
    ASSERT_TRUE(cpu::batch_norm_f32_forward_eval(g, k.x.data(), k.w.data(), k.b.data(), k.rmean.data(), k.rvar.data(),
                                                 eps, y.data()));
    for (int64_t c = 0; c < g.c; ++c) invstd[c] = static_cast<float>(1.0 / std::sqrt(k.rvar[c] + eps));
    std::vector<float> dx(k.x.size());
    // No weight: the scale is 1. No dweight or dbias asked for.
    ASSERT_TRUE(cpu::batch_norm_f32_backward(g, false, k.x.data(), k.dy.data(), nullptr, k.rmean.data(), invstd.data(),
                                             dx.data(), nullptr, nullptr));
    for (int64_t c = 0; c < g.c; ++c)
      for (int64_t i = 0; i < g.n; ++i)
        for (int64_t p = 0; p < g.hw; ++p) {
          const size_t j = at(g, i, c, p);
          const double is = 1.0 / std::sqrt(static_cast<double>(k.rvar[c]) + eps);
          expect_near_rel(y[j], (k.x[j] - k.rmean[c]) * is * k.w[c] + k.b[c], 1e-5, "y");
          expect_near_rel(dx[j], k.dy[j] * static_cast<double>(invstd[c]), 1e-6, "dx");
        }
    if (::testing::Test::HasFailure()) return;
  }
}

// batch_norm_act's epilogue in the same pass: y = act(bn(x) + r) with ReLU6 clamping at 0 and 6; backward masks
// dy where y is not in (0, 6), adds the masked gradient to dresidual in place, and takes the masked gradient
// through batch norm's backward.
TEST(CpuBatchNormF32, FusedResidualAndRelu6MatchF64Formulas) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (int trial = 0; trial < 30; ++trial) {
    Case k = random_case(rng);
    const BatchNormGeometry& g = k.g;
    const double eps = 1e-5, m = static_cast<double>(g.n * g.hw);
    std::normal_distribution<float> normal;
    std::vector<float> r(k.x.size()), dres(k.x.size());
    for (float& v : r) v = 3.f * normal(rng);  // some sums above 6, some below 0
    for (float& v : dres) v = normal(rng);
    const std::vector<float> dres0 = dres;
    std::vector<float> y(k.x.size()), mean(g.c), invstd(g.c), dx(k.x.size()), dw(g.c), db(g.c);
    ASSERT_TRUE(cpu::batch_norm_f32_forward_train(g, k.x.data(), k.w.data(), k.b.data(), eps, 0.1, nullptr, nullptr,
                                                  y.data(), mean.data(), invstd.data(), r.data(), BnActivation::Relu6));
    ASSERT_TRUE(cpu::batch_norm_f32_backward(g, true, k.x.data(), k.dy.data(), k.w.data(), mean.data(), invstd.data(),
                                             dx.data(), dw.data(), db.data(),
                                             {y.data(), BnActivation::Relu6, true, dres.data()}));
    for (int64_t c = 0; c < g.c; ++c) {
      const double mu = mean[c], is = invstd[c];
      double sg = 0, sgx = 0;  // Σ g and Σ g xhat, g = dy where 0 < y < 6, else 0
      std::vector<double> grad(static_cast<size_t>(g.n * g.hw));
      for (int64_t i = 0; i < g.n; ++i)
        for (int64_t p = 0; p < g.hw; ++p) {
          const size_t j = at(g, i, c, p);
          const double v = (k.x[j] - mu) * is * k.w[c] + k.b[c] + r[j];
          expect_near_rel(y[j], std::min(6.0, std::max(0.0, v)), 1e-5, "y");
          const double gj = y[j] > 0.f && y[j] < 6.f ? k.dy[j] : 0.0;
          grad[static_cast<size_t>(i * g.hw + p)] = gj;
          EXPECT_EQ(dres[j], dres0[j] + static_cast<float>(gj)) << "dresidual accumulated";
          sg += gj;
          sgx += gj * (k.x[j] - mu) * is;
        }
      expect_near_rel(db[c], sg, 1e-5, "dbias");
      expect_near_rel(dw[c], sgx, 1e-5, "dweight");
      for (int64_t i = 0; i < g.n; ++i)
        for (int64_t p = 0; p < g.hw; ++p) {
          const size_t j = at(g, i, c, p);
          const double xhat = (k.x[j] - mu) * is, gj = grad[static_cast<size_t>(i * g.hw + p)];
          const double terms = k.w[c] * is / m * (m * std::fabs(gj) + std::fabs(sg) + std::fabs(xhat * sgx));
          EXPECT_LE(std::fabs(dx[j] - k.w[c] * is / m * (m * gj - sg - xhat * sgx)), 1e-6 * (1 + terms)) << "dx";
        }
    }
    if (::testing::Test::HasFailure()) {
      ADD_FAILURE() << "shape n=" << g.n << " c=" << g.c << " hw=" << g.hw;
      return;
    }
  }
}

TEST(CpuBatchNormF32, TheSameBitsForAnyThreadCount) {
  std::mt19937_64 rng(testing::fresh_seed());
  BatchNormGeometry g;
  g.n = 4, g.c = 64, g.hw = 1000 + static_cast<int64_t>(rng() % 50);  // enough work to split
  Case k = random_case(rng);
  k.g = g;
  std::normal_distribution<float> normal;
  k.x.resize(static_cast<size_t>(g.n * g.c * g.hw));
  for (float& v : k.x) v = 1.f + normal(rng);
  k.dy = k.x;
  for (float& v : k.dy) v = normal(rng);
  k.w.assign(g.c, 1.5f);
  k.b.assign(g.c, 0.25f);
  auto run = [&](int threads) {
    const int before = intra_op_threads();
    set_intra_op_threads(threads);
    std::vector<float> y(k.x.size()), mean(g.c), invstd(g.c), dx(k.x.size()), dw(g.c), db(g.c);
    cpu::batch_norm_f32_forward_train(g, k.x.data(), k.w.data(), k.b.data(), 1e-5, 0.1, nullptr, nullptr, y.data(),
                                      mean.data(), invstd.data());
    cpu::batch_norm_f32_backward(g, true, k.x.data(), k.dy.data(), k.w.data(), mean.data(), invstd.data(), dx.data(),
                                 dw.data(), db.data());
    set_intra_op_threads(before);
    y.insert(y.end(), dx.begin(), dx.end());
    y.insert(y.end(), dw.begin(), dw.end());
    return y;
  };
  const std::vector<float> one = run(1), three = run(3);
  ASSERT_EQ(one.size(), three.size());
  for (size_t i = 0; i < one.size(); ++i) ASSERT_EQ(one[i], three[i]) << "element " << i;
}

TEST(CpuBatchNormF32, StepsAsideWhenSwitchedOffOrNotF32Nchw) {
  BatchNormGeometry g;
  g.n = 1, g.c = 1, g.hw = 1;
  float x = 1, y = 0, mean = 0, invstd = 0;
  g.channels_last = true;
  EXPECT_FALSE(cpu::batch_norm_f32_forward_eval(g, &x, nullptr, nullptr, &mean, &invstd, 1e-5, &y));
  g.channels_last = false;
  g.dtype = DType::F64;
  EXPECT_FALSE(cpu::batch_norm_f32_forward_eval(g, &x, nullptr, nullptr, &mean, &invstd, 1e-5, &y));
  g.dtype = DType::F32;
  const bool before = cpu_onednn();
  set_cpu_onednn(false);
  EXPECT_FALSE(
      cpu::batch_norm_f32_forward_train(g, &x, nullptr, nullptr, 1e-5, 0.1, nullptr, nullptr, &y, &mean, &invstd));
  EXPECT_FALSE(cpu::batch_norm_f32_backward(g, true, &x, &x, nullptr, &mean, &invstd, &y, nullptr, nullptr));
  set_cpu_onednn(before);
  EXPECT_EQ(y, 0.f) << "nothing written";
}

}  // namespace
}  // namespace tandem
