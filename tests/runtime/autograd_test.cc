// The autograd engine: shared subgraphs, accumulation, retain_graph, saved-tensor version checks, in-place
// refusals, grad mode, detach, integer and multi-output ops, dtype casts, and graphs on concurrent threads.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using autograd::NoGradGuard;
using tandem::testing::expect_close;
using tandem::testing::fresh_seed;

Tensor leaf(const Shape& shape, Generator& gen) { return randn(shape, gen, DType::F64).set_requires_grad(); }

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

// Runs `f` and returns the AutogradError's what(), or "" when nothing was thrown.
template <typename F>
std::string autograd_error(F&& f) {
  try {
    f();
  } catch (const AutogradError& e) {
    return e.what();
  }
  return "";
}

TEST(Autograd, SharedSubgraphGradientsAddUp) {
  Generator gen(fresh_seed());
  Tensor x = leaf({5}, gen);
  Tensor h = exp(x);  // used by three ops
  Tensor loss = sum(h * 2.0) + sum(h * h) + sum(h);
  loss.backward();
  std::vector<double> xv = values(x), g = values(x.grad());
  for (size_t i = 0; i < xv.size(); ++i) {
    double e = std::exp(xv[i]);
    EXPECT_NEAR(g[i], (2.0 + 2.0 * e + 1.0) * e, 1e-12 * std::max(1.0, e * e)) << i;
  }
}

TEST(Autograd, GradientsAccumulateAcrossBackwardCallsUntilZeroGrad) {
  Generator gen(fresh_seed());
  Tensor x = leaf({4}, gen);
  sum(x * x).backward();
  Tensor first = x.grad().clone();
  sum(x * x).backward();
  std::vector<double> xv = values(x), g = values(x.grad());
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(g[i], 4.0 * xv[i], 1e-14) << i;
  x.zero_grad();
  EXPECT_FALSE(x.grad().defined());
  sum(x * x).backward();
  expect_close(x.grad(), first, 0.0, "after zero_grad");
}

TEST(Autograd, BackwardWithAGradientForANonScalar) {
  Generator gen(fresh_seed());
  Tensor x = leaf({2, 3}, gen);
  Tensor w = randn({2, 3}, gen, DType::F64);
  (x * 3.0).backward(w);
  std::vector<double> g = values(x.grad()), wv = values(w);
  for (size_t i = 0; i < g.size(); ++i) EXPECT_DOUBLE_EQ(g[i], 3.0 * wv[i]);
  EXPECT_THROW((x * 3.0).backward(zeros({3, 2}, DType::F64)), ShapeError);
}

TEST(Autograd, BackwardOfANonScalarWithoutGradientThrows) {
  Generator gen(fresh_seed());
  Tensor x = leaf({2, 3}, gen);
  std::string msg = autograd_error([&] { exp(x).backward(); });
  EXPECT_NE(msg.find("scalar"), std::string::npos) << msg;
  EXPECT_NE(msg.find("[2, 3]"), std::string::npos) << msg;
}

TEST(Autograd, BackwardOfATensorThatDoesNotRequireGradThrows) {
  Tensor x = ones({3}, DType::F64);
  EXPECT_FALSE(autograd_error([&] { sum(x).backward(); }).empty());
}

TEST(Autograd, RetainGraphAllowsASecondBackward) {
  Generator gen(fresh_seed());
  Tensor x = leaf({3}, gen);
  Tensor y = sum(exp(x));
  y.backward(Tensor(), /*retain_graph=*/true);
  y.backward();  // frees the graph
  std::vector<double> xv = values(x), g = values(x.grad());
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(g[i], 2.0 * std::exp(xv[i]), 1e-12);
  std::string msg = autograd_error([&] { y.backward(); });
  EXPECT_NE(msg.find("retain_graph"), std::string::npos) << msg;

  Tensor z = sum(exp(x) * x);
  z.backward();
  EXPECT_NE(autograd_error([&] { z.backward(); }).find("second time"), std::string::npos);
}

TEST(Autograd, SavedOutputModifiedInPlaceIsDetected) {
  Generator gen(fresh_seed());
  Tensor x = leaf({4}, gen);
  Tensor y = exp(x);  // saves its output
  {
    NoGradGuard ng;
    y.fill_(1.0);
  }
  std::string msg = autograd_error([&] { sum(y).backward(); });
  EXPECT_NE(msg.find("'exp'"), std::string::npos) << msg;
  EXPECT_NE(msg.find("modified in place"), std::string::npos) << msg;
}

TEST(Autograd, SavedNonLeafInputModifiedInPlaceIsDetected) {
  Generator gen(fresh_seed());
  Tensor a = leaf({3}, gen), w = leaf({3}, gen);
  Tensor h = a + 1.0;  // a non-leaf input that mul saves for w's gradient
  Tensor y = h * w;
  // In grad mode the in-place change itself is refused, naming the op that made h.
  std::string refused = autograd_error([&] { h.copy_(zeros({3}, DType::F64)); });
  EXPECT_NE(refused.find("add_scalar"), std::string::npos) << refused;
  {
    NoGradGuard ng;
    h.copy_(zeros({3}, DType::F64));
  }
  std::string msg = autograd_error([&] { sum(y).backward(); });
  EXPECT_NE(msg.find("'mul'"), std::string::npos) << msg;
  // A view shares the version counter: changing the base is seen through the view.
  Tensor b = a * 1.0;
  Tensor v = b.view({3, 1});
  Tensor z = v * v;  // saves the view
  {
    NoGradGuard ng;
    b.fill_(0.5);
  }
  EXPECT_NE(autograd_error([&] { sum(z).backward(); }).find("'mul'"), std::string::npos);
}

TEST(Autograd, InPlaceOnALeafThatRequiresGradThrows) {
  Generator gen(fresh_seed());
  Tensor x = leaf({3}, gen);
  Tensor y = randn({3}, gen, DType::F64);
  EXPECT_NE(autograd_error([&] { x.fill_(0.0); }).find("leaf"), std::string::npos);
  EXPECT_FALSE(autograd_error([&] { x.copy_(y); }).empty());
  EXPECT_FALSE(autograd_error([&] { add_(x, y); }).empty());
  EXPECT_FALSE(autograd_error([&] { mul_(x, 2.0); }).empty());
  uint64_t v = x.version();
  {
    NoGradGuard ng;  // the optimizer-step pattern
    add_(x, y, -0.5);
    mul_(x, 2.0);
  }
  EXPECT_EQ(x.version(), v + 2);
  EXPECT_TRUE(x.requires_grad());
}

TEST(Autograd, NoGradGuardRecordsNothingAndIsThreadLocal) {
  Generator gen(fresh_seed());
  Tensor x = leaf({3}, gen);
  EXPECT_TRUE(autograd::grad_enabled());
  {
    NoGradGuard ng;
    EXPECT_FALSE(autograd::grad_enabled());
    Tensor y = exp(x) * 2.0;
    EXPECT_FALSE(y.requires_grad());
    EXPECT_EQ(y.grad_fn(), nullptr);
    // Another thread has its own grad mode, on by default.
    bool other_records = false;
    std::thread([&] { other_records = (x * 2.0).requires_grad() && autograd::grad_enabled(); }).join();
    EXPECT_TRUE(other_records);
    { NoGradGuard nested; }
    EXPECT_FALSE(autograd::grad_enabled());
  }
  EXPECT_TRUE(autograd::grad_enabled());
  // A thread that turns grad off does not affect this one.
  std::thread([] { autograd::set_grad_enabled(false); }).join();
  EXPECT_TRUE(autograd::grad_enabled());
  EXPECT_TRUE((x * 2.0).requires_grad());
}

TEST(Autograd, DetachSharesStorageButCutsTheGraph) {
  Generator gen(fresh_seed());
  Tensor x = leaf({3}, gen);
  Tensor y = exp(x);
  Tensor d = y.detach();
  EXPECT_TRUE(d.storage().same(y.storage()));
  EXPECT_FALSE(d.requires_grad());
  EXPECT_TRUE(d.is_leaf());
  Tensor loss = sum(y * d);  // d is a constant
  loss.backward();
  std::vector<double> xv = values(x), g = values(x.grad());
  for (size_t i = 0; i < xv.size(); ++i) EXPECT_NEAR(g[i], std::exp(2 * xv[i]), 1e-12 * std::exp(2 * xv[i]));
}

TEST(Autograd, IntegerOutputsCarryNoGradient) {
  Generator gen(fresh_seed());
  Tensor x = leaf({3, 4}, gen);
  EXPECT_FALSE(argmax(x, 1).requires_grad());
  MaxResult m = max(x, 0);
  EXPECT_TRUE(m.values.requires_grad());
  EXPECT_FALSE(m.indices.requires_grad());
  EXPECT_EQ(m.indices.dtype(), DType::I64);
  EXPECT_FALSE(gt(x, zeros({4}, DType::F64)).requires_grad());
  EXPECT_FALSE(x.to(DType::I64).requires_grad());
  EXPECT_THROW(ones({2}, DType::I64).set_requires_grad(), DTypeError);
}

TEST(Autograd, MultiOutputOpsWithOnlySomeOutputsUsed) {
  Generator gen(fresh_seed());
  Tensor x = leaf({5, 2}, gen);
  std::vector<Tensor> parts = split(x, std::vector<int64_t>{2, 3}, 0);
  sum(parts[1] * 2.0).backward();
  std::vector<double> g = values(x.grad());
  for (int i = 0; i < 10; ++i) EXPECT_EQ(g[i], i < 4 ? 0.0 : 2.0) << i;

  // max: the values output is used, the indices output never takes part.
  Tensor y = from_vector<double>({1, 5, 3, 9, 2, 4}, {2, 3}).set_requires_grad();
  MaxResult m = max(y, 1);
  sum(m.values * 3.0).backward();
  EXPECT_EQ(values(y.grad()), (std::vector<double>{0, 3, 0, 3, 0, 0}));
  EXPECT_EQ(m.indices.to_vector<int64_t>(), (std::vector<int64_t>{1, 0}));
}

TEST(Autograd, LeavesNotReachedKeepNoGradient) {
  Generator gen(fresh_seed());
  Tensor a = leaf({3}, gen), b = leaf({3}, gen);
  Tensor unused = a * b;
  sum(a * 2.0).backward();
  EXPECT_TRUE(a.grad().defined());
  EXPECT_FALSE(b.grad().defined());
}

TEST(Autograd, DtypeCastsSendGradientsBackInTheSourceDtype) {
  Generator gen(fresh_seed());
  Tensor x = leaf({4}, gen);
  Tensor w = randn({4}, gen, DType::F32);
  sum(x.to(DType::F32) * w).backward();
  ASSERT_TRUE(x.grad().defined());
  EXPECT_EQ(x.grad().dtype(), DType::F64);
  expect_close(x.grad(), w.to(DType::F64), 0.0, "f64 -> f32 cast");

  Tensor x32 = randn({4}, gen, DType::F32).set_requires_grad();
  Tensor w64 = randn({4}, gen, DType::F64);
  sum(x32.to(DType::F64) * w64).backward();
  EXPECT_EQ(x32.grad().dtype(), DType::F32);
  expect_close(x32.grad(), w64.to(DType::F32), 0.0, "f32 -> f64 cast");
}

TEST(Autograd, SetRequiresGradIsForLeaves) {
  Generator gen(fresh_seed());
  Tensor x = leaf({2}, gen);
  Tensor y = x * 2.0;
  EXPECT_FALSE(y.is_leaf());
  EXPECT_EQ(y.grad_fn()->name(), "mul_scalar");
  EXPECT_FALSE(autograd_error([&] { y.set_requires_grad(); }).empty());
  EXPECT_TRUE(y.detach().set_requires_grad().requires_grad());
}

TEST(Autograd, CustomNodeThroughRecord) {
  Generator gen(fresh_seed());
  Tensor x = leaf({3}, gen);
  Tensor y = x.detach().clone();
  autograd::record("times_five", {x}, {y}, [](std::vector<Tensor>& g, const std::vector<bool>& needs) {
    EXPECT_TRUE(needs[0]);
    return std::vector<Tensor>{g[0] * 5.0};
  });
  EXPECT_EQ(y.grad_fn()->name(), "times_five");
  sum(y).backward();
  for (double g : values(x.grad())) EXPECT_EQ(g, 5.0);
}

TEST(Autograd, NodesThatReceiveNoGradientAreSkipped) {
  Generator gen(fresh_seed());
  Tensor x = leaf({3}, gen);
  Tensor h = exp(x);  // its only consumer below sends it no gradient
  Tensor blocked = h.detach().clone();
  autograd::record("blocks_gradient", {h}, {blocked},
                   [](std::vector<Tensor>&, const std::vector<bool>&) { return std::vector<Tensor>{Tensor()}; });
  Tensor loss = sum(blocked) + sum(x * 2.0);
  loss.backward();
  for (double g : values(x.grad())) EXPECT_EQ(g, 2.0);
}

TEST(Autograd, SeveralRootsShareTheirGraph) {
  Generator gen(fresh_seed());
  Tensor x = leaf({4}, gen);
  Tensor h = x * 3.0;
  Tensor a = h * 2.0, b = exp(h);
  autograd::backward({a, b}, {ones({4}, DType::F64), full({4}, 0.5, DType::F64)});
  std::vector<double> xv = values(x), g = values(x.grad());
  // Relative to the whole gradient: with x very negative, exp(3x) alone is below one rounding step of 6.
  for (size_t i = 0; i < xv.size(); ++i) {
    const double expected = 6.0 + 1.5 * std::exp(3 * xv[i]);
    EXPECT_NEAR(g[i], expected, 1e-12 * expected);
  }
  EXPECT_THROW(autograd::backward({a}, {}), ValueError);
}

// A two-layer classifier trained for a few SGD steps; returns the final weights and every loss.
std::vector<double> train_mlp(uint64_t seed, int steps) {
  Generator gen(seed);
  TensorOptions o(DType::F64);
  Tensor w1 = (randn({8, 4}, gen, o) * 0.5).detach().set_requires_grad();
  Tensor b1 = zeros({8}, o.with_requires_grad());
  Tensor w2 = (randn({3, 8}, gen, o) * 0.5).detach().set_requires_grad();
  Tensor x = randn({6, 4}, gen, o);
  Tensor labels = from_vector<int64_t>({0, 1, 2, 1, 0, 2}, {6, 1});
  std::vector<double> trace;
  for (int s = 0; s < steps; ++s) {
    Tensor logits = linear(relu(linear(x, w1, b1)), w2);
    Tensor loss = neg(mean(gather(log_softmax(logits, 1), 1, labels)));
    loss.backward();
    trace.push_back(loss.item<double>());
    NoGradGuard ng;
    for (Tensor* p : {&w1, &b1, &w2}) {
      add_(*p, p->grad(), -0.1);
      p->zero_grad();
    }
  }
  for (const Tensor& p : {w1, b1, w2})
    for (double v : p.to_vector<double>()) trace.push_back(v);
  return trace;
}

TEST(Autograd, ConcurrentGraphsOnThreadsMatchTheSingleThreadedRun) {
  const int kThreads = 4, kSteps = 15;
  uint64_t base = fresh_seed();
  std::vector<std::vector<double>> expected;
  for (int t = 0; t < kThreads; ++t) expected.push_back(train_mlp(base + t, kSteps));
  EXPECT_LT(expected[0][kSteps - 1], expected[0][0]);  // it trains
  for (int round = 0; round < 3; ++round) {
    std::vector<std::vector<double>> got(kThreads);
    std::vector<std::thread> threads;
    for (int t = 0; t < kThreads; ++t) threads.emplace_back([&, t] { got[t] = train_mlp(base + t, kSteps); });
    for (auto& th : threads) th.join();
    for (int t = 0; t < kThreads; ++t) EXPECT_EQ(got[t], expected[t]) << "thread " << t << ", round " << round;
  }
}

}  // namespace
}  // namespace tandem
