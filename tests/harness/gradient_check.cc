// The finite-difference gradient checker: probes, kink skipping and the comparison rule.
#include "tests/harness/gradient_check.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {

namespace {
// Memory offset (in elements) of row-major element `index` of t.
int64_t offset_of(const Tensor& t, int64_t index) {
  int64_t off = 0;
  for (int64_t d = t.dim() - 1; d >= 0; --d) {
    off += (index % t.shape()[d]) * t.strides()[d];
    index /= t.shape()[d];
  }
  return off;
}

// The probed elements of an n-element tensor.
std::vector<int64_t> probes_of(int64_t n, int64_t max_probes) {
  const int64_t count = max_probes > 0 ? std::min(n, max_probes) : n;
  std::vector<int64_t> at;
  for (int64_t k = 0; k < count; ++k) at.push_back(count == n ? k : (k * (n - 1)) / std::max<int64_t>(count - 1, 1));
  return at;
}
}  // namespace

void expect_finite_differences(const std::function<double()>& loss, const NamedTensors& wrt,
                               const std::vector<std::vector<double>>& autograd, const GradientCheck& check) {
  ASSERT_EQ(wrt.size(), autograd.size());
  autograd::NoGradGuard no_grad;
  for (size_t k = 0; k < wrt.size(); ++k) {
    const std::string& name = wrt[k].first;
    const Tensor& t = wrt[k].second;
    ASSERT_EQ(t.dtype(), DType::F64) << name << ": gradient checks run in f64";
    ASSERT_EQ(t.device(), Device::cpu()) << name;
    ASSERT_EQ(autograd[k].size(), static_cast<size_t>(t.numel())) << name;
    double* data = static_cast<double*>(t.raw_data());
    auto central_difference = [&](int64_t i, double h) {
      double* e = data + offset_of(t, i);
      const double saved = *e;
      *e = saved + h;
      const double up = loss();
      *e = saved - h;
      const double down = loss();
      *e = saved;
      return (up - down) / (2 * h);
    };
    const std::vector<int64_t> at = probes_of(t.numel(), check.max_probes);
    std::vector<double> numeric, coarse;
    double magnitude = check.magnitude_floor;
    for (int64_t i : at) {
      numeric.push_back(central_difference(i, check.step));
      magnitude = std::max(magnitude, std::abs(numeric.back()));
      if (check.skip_kinks) coarse.push_back(central_difference(i, check.step / 4));
    }
    std::vector<double> got, want;
    std::vector<int64_t> kept;
    for (size_t p = 0; p < at.size(); ++p) {
      if (check.skip_kinks && std::abs(numeric[p] - coarse[p]) > check.tol * magnitude) continue;
      got.push_back(autograd[k][static_cast<size_t>(at[p])]);
      want.push_back(numeric[p]);
      kept.push_back(at[p]);
    }
    const int64_t skipped = static_cast<int64_t>(at.size() - kept.size());
    EXPECT_LE(skipped, std::max<int64_t>(1, static_cast<int64_t>(at.size()) / 4))
        << name << ": " << skipped << " of " << at.size() << " probes straddle a kink; too rough to check";
    if (kept.empty()) continue;
    const Discrepancy d = compare_values(got, want, magnitude > check.magnitude_floor ? 0.0 : magnitude);
    EXPECT_LE(d.error, check.tol) << name << " of shape " << shape_str(t.shape()) << ": element " << kept[d.at]
                                  << " has autograd " << got[d.at] << ", finite difference " << want[d.at] << " (error "
                                  << d.error << " of the gradient's magnitude)";
  }
}

void expect_gradients_match(const std::function<Tensor()>& loss, const NamedTensors& wrt, const GradientCheck& check) {
  NamedTensors checked;
  for (const auto& kv : wrt) {
    if (!kv.second.defined() || !kv.second.requires_grad()) continue;
    ASSERT_TRUE(kv.second.is_leaf()) << kv.first << " is not a leaf";
    Tensor(kv.second).zero_grad();  // gradients of an earlier check must not add up
    checked.push_back(kv);
  }
  ASSERT_FALSE(checked.empty()) << "nothing to differentiate with respect to";
  loss().backward();
  std::vector<std::vector<double>> autograd;
  for (const auto& kv : checked) {
    const Tensor g = kv.second.grad();
    // No gradient at all is a zero gradient (a parameter the loss does not reach); the differences say so.
    const size_t n = static_cast<size_t>(kv.second.numel());
    autograd.push_back(g.defined() ? g.to_vector<double>() : std::vector<double>(n, 0.0));
    if (g.defined()) {
      EXPECT_EQ(g.shape(), kv.second.shape()) << kv.first << ": gradient shape";
    }
  }
  expect_finite_differences([&] { return loss().item<double>(); }, checked, autograd, check);
}

void expect_gradients_match(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            const std::vector<Tensor>& inputs, const GradientCheck& check) {
  Tensor r;
  {
    autograd::NoGradGuard no_grad;
    Generator gen(fresh_seed());
    r = randn(f(inputs).shape(), gen, TensorOptions(DType::F64).with_device(Device::cpu()));
  }
  NamedTensors wrt;
  for (size_t k = 0; k < inputs.size(); ++k) wrt.emplace_back("input " + std::to_string(k), inputs[k]);
  expect_gradients_match([&] { return sum(mul(f(inputs), r)); }, wrt, check);
}

}  // namespace testing
}  // namespace tandem
