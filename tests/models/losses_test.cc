// Losses: values against double-precision formulas, finite-difference gradients, and label/shape errors.
#include <gtest/gtest.h>

#include <cmath>

#include "models/losses.h"
#include "runtime/base/error.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/harness/gradient_check.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

using tandem::testing::expect_gradients_match;
using tandem::testing::fresh_seed;

// log_softmax of row n of a [N, C] host matrix.
std::vector<double> log_softmax_row(const std::vector<double>& v, int64_t n, int64_t C, double scale = 1.0) {
  double m = -INFINITY, s = 0;
  for (int64_t c = 0; c < C; ++c) m = std::max(m, v[n * C + c] * scale);
  for (int64_t c = 0; c < C; ++c) s += std::exp(v[n * C + c] * scale - m);
  std::vector<double> out(C);
  for (int64_t c = 0; c < C; ++c) out[c] = v[n * C + c] * scale - m - std::log(s);
  return out;
}

Tensor random_labels(Generator& gen, int64_t n, int64_t classes) {
  std::vector<int64_t> l(n);
  for (auto& v : l) v = static_cast<int64_t>(gen.integer(classes));
  return from_vector<int64_t>(l, {n});
}

TEST(Losses, MseMatchesFormulaAndGradient) {
  Generator gen(fresh_seed());
  Tensor a = randn({3, 4, 2}, gen, DType::F64), b = randn({3, 4, 2}, gen, DType::F64);
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  double ref = 0;
  for (size_t i = 0; i < av.size(); ++i) ref += (av[i] - bv[i]) * (av[i] - bv[i]) / av.size();
  EXPECT_NEAR(mse_loss(a, b).item<double>(), ref, 1e-12);
  a.set_requires_grad(true);
  b.set_requires_grad(true);
  expect_gradients_match([&] { return mse_loss(a, b); }, {{"input", a}, {"target", b}});
  EXPECT_THROW(mse_loss(a, randn({3, 4}, gen, DType::F64)), ShapeError);
}

TEST(Losses, CrossEntropyWithAndWithoutSmoothing) {
  Generator gen(fresh_seed());
  const int64_t N = 5, C = 7;
  Tensor logits = randn({N, C}, gen, DType::F64) * 3.0;
  Tensor labels = random_labels(gen, N, C);
  auto lv = logits.to_vector<double>();
  auto yv = labels.to_vector<int64_t>();
  for (double eps : {0.0, 0.1, 0.35}) {
    double ref = 0;
    for (int64_t n = 0; n < N; ++n) {
      auto lp = log_softmax_row(lv, n, C);
      // Target distribution (1 - eps) * one_hot + eps / C.
      for (int64_t c = 0; c < C; ++c) ref -= ((c == yv[n] ? 1 - eps : 0) + eps / C) * lp[c] / N;
    }
    EXPECT_NEAR(cross_entropy(logits, labels, eps).item<double>(), ref, 1e-12) << "smoothing " << eps;
    Tensor x = logits.clone().set_requires_grad(true);
    expect_gradients_match([&] { return cross_entropy(x, labels, eps); }, {{"logits", x}});
  }
  // f32 agrees with f64.
  EXPECT_NEAR(cross_entropy(logits.to(DType::F32), labels).item<float>(), cross_entropy(logits, labels).item<double>(),
              1e-5);
}

TEST(Losses, CrossEntropyChecksLabels) {
  Generator gen(fresh_seed());
  Tensor logits = randn({3, 4}, gen);
  try {
    cross_entropy(logits, from_vector<int64_t>({0, 4, 1}, {3}));
    ADD_FAILURE() << "expected IndexError";
  } catch (const IndexError& e) {
    EXPECT_NE(std::string(e.what()).find("label 4 at position 1 is out of range for 4 classes"), std::string::npos)
        << e.what();
  }
  EXPECT_THROW(cross_entropy(logits, from_vector<int64_t>({0, -1, 1}, {3})), IndexError);
  EXPECT_THROW(cross_entropy(logits, from_vector<int32_t>({0, 1, 1}, {3})), DTypeError);
  EXPECT_THROW(cross_entropy(logits, from_vector<int64_t>({0, 1}, {2})), ShapeError);
  EXPECT_THROW(cross_entropy(randn({3}, gen), from_vector<int64_t>({0, 1, 1}, {3})), ShapeError);
  EXPECT_THROW(cross_entropy(logits, from_vector<int64_t>({0, 1, 1}, {3}), 1.5), ValueError);
}

TEST(Losses, SoftCrossEntropyIsPipeBdLossAtTemperatureOne) {
  Generator gen(fresh_seed());
  const int64_t N = 4, C = 6;
  Tensor s = randn({N, C}, gen, DType::F64) * 2.0, t = randn({N, C}, gen, DType::F64) * 2.0;
  auto sv = s.to_vector<double>(), tv = t.to_vector<double>();
  for (double T : {1.0, 2.5}) {
    double ref = 0;
    for (int64_t n = 0; n < N; ++n) {
      auto ls = log_softmax_row(sv, n, C, 1 / T), lt = log_softmax_row(tv, n, C, 1 / T);
      for (int64_t c = 0; c < C; ++c) ref -= T * T * std::exp(lt[c]) * ls[c] / N;
    }
    EXPECT_NEAR(soft_cross_entropy(s, t, T).item<double>(), ref, 1e-12) << "T = " << T;
    Tensor x = s.clone().set_requires_grad(true), tt = t.clone().set_requires_grad(true);
    expect_gradients_match([&] { return soft_cross_entropy(x, tt, T); }, {{"student", x}});
    // No gradient reaches the teacher.
    soft_cross_entropy(x, tt, T).backward();
    EXPECT_FALSE(tt.grad().defined());
  }
  // With one-hot-like teacher probabilities it approaches the hard-label cross-entropy.
  Tensor labels = from_vector<int64_t>({1, 0, 5, 2}, {4});
  Tensor sharp = one_hot(labels, C, DType::F64) * 200.0;
  EXPECT_NEAR(soft_cross_entropy(s, sharp).item<double>(), cross_entropy(s, labels).item<double>(), 1e-9);
  EXPECT_THROW(soft_cross_entropy(s, t, 0.0), ValueError);
  EXPECT_THROW(soft_cross_entropy(s, randn({N, C + 1}, gen, DType::F64)), ShapeError);
}

TEST(Losses, KlDivBatchmean) {
  Generator gen(fresh_seed());
  const int64_t N = 3, C = 5;
  Tensor logits = randn({N, C}, gen, DType::F64);
  Tensor logq = log_softmax(logits, 1);
  Tensor p = softmax(randn({N, C}, gen, DType::F64), 1);
  // One zero target probability: 0 * log 0 counts as 0.
  std::vector<double> pv = p.to_vector<double>();
  pv[2] = 0;
  p = from_vector<double>(pv, {N, C});
  auto qv = logq.to_vector<double>();
  double ref = 0;
  for (size_t i = 0; i < pv.size(); ++i)
    if (pv[i] > 0) ref += pv[i] * (std::log(pv[i]) - qv[i]) / N;
  Tensor k = kl_div(logq, p);
  EXPECT_NEAR(k.item<double>(), ref, 1e-12);
  EXPECT_FALSE(std::isnan(k.item<double>()));
  // KL(p || p) = 0.
  Tensor pp = softmax(logits, 1);
  EXPECT_NEAR(kl_div(log(pp), pp).item<double>(), 0.0, 1e-12);
  Tensor x = logits.clone().set_requires_grad(true);
  expect_gradients_match([&] { return kl_div(log_softmax(x, 1), p); }, {{"logits", x}});
  EXPECT_THROW(kl_div(logq, randn({N, C + 1}, gen, DType::F64)), ShapeError);
}

}  // namespace
}  // namespace models
}  // namespace tandem
