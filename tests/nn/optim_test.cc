// Fused optimizer steps on the CPU against a plain per-element f64 reference over several steps (momentum,
// Nesterov, dampening, weight decay; Adam and AdamW with bias correction), and error paths.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

const std::vector<Shape> kShapes = {{3, 4}, {7}, {2, 3, 2, 2}};

std::vector<Tensor> random_list(Generator& gen, DType dtype) {
  std::vector<Tensor> out;
  for (const Shape& s : kShapes) out.push_back(randn(s, gen, dtype));
  return out;
}

std::vector<Tensor> zeros_list(DType dtype) {
  std::vector<Tensor> out;
  for (const Shape& s : kShapes) out.push_back(zeros(s, dtype));
  return out;
}

void check_sgd(const SgdHyper& base, DType dtype, double tol) {
  Generator gen(testing::fresh_seed());
  std::vector<Tensor> params = random_list(gen, dtype), bufs = zeros_list(dtype);
  std::vector<std::vector<double>> p, buf;
  for (size_t t = 0; t < params.size(); ++t) {
    p.push_back(params[t].to_vector<double>());
    buf.push_back(std::vector<double>(p[t].size(), 0.0));
  }
  for (int step = 1; step <= 4; ++step) {
    std::vector<Tensor> grads = random_list(gen, dtype);
    SgdHyper h = base;
    h.first_step = step == 1;
    sgd_step_(params, grads, base.momentum != 0 ? bufs : std::vector<Tensor>{}, h);
    for (size_t t = 0; t < params.size(); ++t) {
      std::vector<double> g = grads[t].to_vector<double>();
      for (size_t i = 0; i < g.size(); ++i) {
        double d = g[i] + h.weight_decay * p[t][i];
        if (h.momentum != 0) {
          buf[t][i] = step == 1 ? d : h.momentum * buf[t][i] + (1 - h.dampening) * d;
          d = h.nesterov ? d + h.momentum * buf[t][i] : buf[t][i];
        }
        p[t][i] -= h.lr * d;
      }
      testing::expect_close(params[t], from_vector(p[t], kShapes[t]).to(dtype), tol,
                            "sgd step " + std::to_string(step));
      if (h.momentum != 0)
        testing::expect_close(bufs[t], from_vector(buf[t], kShapes[t]).to(dtype), tol, "momentum buffer");
    }
  }
}

TEST(SgdStep, MatchesReference) {
  for (DType dtype : {DType::F64, DType::F32}) {
    double tol = dtype == DType::F64 ? 1e-13 : 1e-5;
    check_sgd(SgdHyper{0.1, 0, 0, 0, false}, dtype, tol);
    check_sgd(SgdHyper{0.05, 0, 0, 0.01, false}, dtype, tol);
    check_sgd(SgdHyper{0.1, 0.9, 0.1, 0.01, false}, dtype, tol);
    check_sgd(SgdHyper{0.1, 0.9, 0, 0.05, true}, dtype, tol);
  }
}

void check_adam(const AdamHyper& base, DType dtype, double tol) {
  Generator gen(testing::fresh_seed());
  std::vector<Tensor> params = random_list(gen, dtype), m = zeros_list(dtype), v = zeros_list(dtype);
  std::vector<std::vector<double>> p, mr, vr;
  for (size_t t = 0; t < params.size(); ++t) {
    p.push_back(params[t].to_vector<double>());
    mr.push_back(std::vector<double>(p[t].size(), 0.0));
    vr.push_back(std::vector<double>(p[t].size(), 0.0));
  }
  for (int step = 1; step <= 4; ++step) {
    std::vector<Tensor> grads = random_list(gen, dtype);
    AdamHyper h = base;
    h.step = step;
    uint64_t before = params[0].version();
    adam_step_(params, grads, m, v, h);
    EXPECT_GT(params[0].version(), before);
    for (size_t t = 0; t < params.size(); ++t) {
      std::vector<double> g = grads[t].to_vector<double>();
      for (size_t i = 0; i < g.size(); ++i) {
        double gi = g[i];
        if (h.decoupled_weight_decay)
          p[t][i] *= 1 - h.lr * h.weight_decay;
        else
          gi += h.weight_decay * p[t][i];
        mr[t][i] = h.beta1 * mr[t][i] + (1 - h.beta1) * gi;
        vr[t][i] = h.beta2 * vr[t][i] + (1 - h.beta2) * gi * gi;
        double bc1 = 1 - std::pow(h.beta1, step), bc2 = 1 - std::pow(h.beta2, step);
        p[t][i] -= h.lr / bc1 * mr[t][i] / (std::sqrt(vr[t][i] / bc2) + h.eps);
      }
      std::string what = "adam step " + std::to_string(step);
      testing::expect_close(params[t], from_vector(p[t], kShapes[t]).to(dtype), tol, what);
      testing::expect_close(m[t], from_vector(mr[t], kShapes[t]).to(dtype), tol, what + " exp_avg");
      testing::expect_close(v[t], from_vector(vr[t], kShapes[t]).to(dtype), tol, what + " exp_avg_sq");
    }
  }
}

AdamHyper adam(double lr, double wd, bool decoupled) {
  AdamHyper h;
  h.lr = lr;
  h.beta1 = 0.8;
  h.beta2 = 0.95;
  h.eps = 1e-6;
  h.weight_decay = wd;
  h.decoupled_weight_decay = decoupled;
  return h;
}

TEST(AdamStep, MatchesReference) {
  for (DType dtype : {DType::F64, DType::F32}) {
    double tol = dtype == DType::F64 ? 1e-12 : 1e-5;
    check_adam(adam(1e-2, 0, false), dtype, tol);
    check_adam(adam(1e-2, 0.05, false), dtype, tol);
    check_adam(adam(1e-2, 0.1, true), dtype, tol);
  }
}

TEST(OptimizerSteps, RejectMismatchedLists) {
  Generator gen(testing::fresh_seed());
  std::vector<Tensor> p = random_list(gen, DType::F32), g = random_list(gen, DType::F32);
  std::vector<Tensor> b = zeros_list(DType::F32);
  SgdHyper h = SgdHyper{0.1, 0.9, 0, 0, false};
  EXPECT_THROW(sgd_step_(p, {g[0], g[1]}, b, h), ValueError);        // list lengths
  EXPECT_THROW(sgd_step_(p, g, {}, h), ValueError);                  // momentum without buffers
  EXPECT_THROW(sgd_step_(p, {g[1], g[0], g[2]}, b, h), ShapeError);  // shapes
  EXPECT_THROW(sgd_step_(p, {g[0].to(DType::F64), g[1], g[2]}, b, h), DTypeError);
  EXPECT_THROW(sgd_step_(p, g, b, SgdHyper{0.1, 0.9, 0.5, 0, true}), ValueError);  // nesterov with dampening
  EXPECT_THROW(sgd_step_(p, g, b, SgdHyper{-1, 0, 0, 0, false}), ValueError);
  std::vector<Tensor> pt = {randn({4, 3}, gen, DType::F32).t()};
  EXPECT_THROW(sgd_step_(pt, {zeros({3, 4})}, {}, SgdHyper{0.1, 0, 0, 0, false}), ValueError);  // not contiguous
  AdamHyper a = adam(1e-3, 0, false);
  EXPECT_THROW(adam_step_(p, g, b, {b[0], b[1]}, a), ValueError);
  EXPECT_THROW(adam_step_({p[0].to(DType::I32)}, {g[0].to(DType::I32)}, {b[0]}, {b[0]}, a), DTypeError);
  a.step = 0;
  EXPECT_THROW(adam_step_(p, g, b, b, a), ValueError);
  a = adam(1e-3, 0, false);
  a.beta1 = 1.0;
  EXPECT_THROW(adam_step_(p, g, b, b, a), ValueError);
}

}  // namespace
}  // namespace tandem
