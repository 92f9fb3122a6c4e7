// Finite-difference gradient checks.
#include "tests/models/gradcheck.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"

namespace tandem {
namespace testing {

void expect_gradients_match(const std::function<Tensor()>& loss, const NamedTensors& wrt, int max_probes,
                            double eps, double tol) {
  for (const auto& kv : wrt) {
    ASSERT_EQ(kv.second.dtype(), DType::F64) << kv.first;
    ASSERT_TRUE(kv.second.is_leaf() && kv.second.requires_grad()) << kv.first;
    Tensor(kv.second).zero_grad();
  }
  loss().backward();
  for (const auto& kv : wrt) {
    const Tensor& t = kv.second;
    ASSERT_TRUE(t.is_contiguous()) << kv.first;
    std::vector<double> analytic = t.grad().defined() ? t.grad().to_vector<double>()
                                                      : std::vector<double>(static_cast<size_t>(t.numel()), 0.0);
    int64_t n = t.numel();
    int64_t probes = std::min<int64_t>(n, max_probes);
    double* data = t.data<double>();
    auto central_difference = [&](int64_t i, double h) {
      autograd::NoGradGuard ng;
      double saved = data[i];
      data[i] = saved + h;
      double up = loss().item<double>();
      data[i] = saved - h;
      double down = loss().item<double>();
      data[i] = saved;
      return (up - down) / (2 * h);
    };
    int64_t skipped = 0;
    for (int64_t k = 0; k < probes; ++k) {
      int64_t i = probes == n ? k : (k * (n - 1)) / std::max<int64_t>(probes - 1, 1);
      double numeric = central_difference(i, eps);
      // A kink (relu, clamp, max) within reach of the probe makes the two step sizes disagree: such a probe
      // says nothing about the gradient and is skipped. A wrong gradient makes both agree on a wrong value.
      if (std::abs(numeric - central_difference(i, eps / 4)) > tol * std::max(1.0, std::abs(numeric))) {
        ++skipped;
        continue;
      }
      EXPECT_LE(std::abs(analytic[i] - numeric), tol * std::max(1.0, std::abs(numeric)))
          << kv.first << "[" << i << "]: autograd " << analytic[i] << " vs finite difference " << numeric;
    }
    EXPECT_LE(skipped, std::max<int64_t>(1, probes / 4))
        << kv.first << ": " << skipped << " of " << probes << " probes straddle a kink; too rough to check";
  }
}

void expect_module_gradients(models::Module& module, const Tensor& x_in, uint64_t seed, int max_probes) {
  Generator gen(seed);
  Tensor x = x_in.detach().to(DType::F64).contiguous().clone().set_requires_grad(true);
  Tensor w;
  {
    autograd::NoGradGuard ng;
    w = randn(module.output_shape(x.shape()), gen, DType::F64);
  }
  NamedTensors rng = module.rng_state();
  auto loss = [&] {
    module.load_rng_state(rng);
    return sum(mul(module.forward(x), w));
  };
  NamedTensors wrt = {{"input", x}};
  for (const auto& p : module.named_parameters())
    if (p.second.requires_grad()) wrt.push_back(p);
  expect_gradients_match(loss, wrt, max_probes);
}

}  // namespace testing
}  // namespace tandem
