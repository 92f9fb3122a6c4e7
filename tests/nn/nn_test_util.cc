// NN test helpers: random inputs and the finite-difference gradient check.
#include "tests/nn/nn_test_util.h"

#include <gtest/gtest.h>

#include <cmath>

#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {

Tensor random_input(const Shape& shape, Generator& gen, DType dtype) {
  return randn(shape, gen, TensorOptions(dtype).with_device(Device::cpu()));
}

std::vector<double> values(const Tensor& t) { return t.to_vector<double>(); }

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

double loss(const std::function<Tensor(const std::vector<Tensor>&)>& f, const std::vector<Tensor>& inputs,
            const Tensor& r) {
  autograd::NoGradGuard ng;
  return sum(mul(f(inputs), r)).item<double>();
}
}  // namespace

void expect_gradients_match(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            const std::vector<Tensor>& inputs, double tol, double eps) {
  for (const Tensor& x : inputs)
    if (x.defined()) Tensor(x).zero_grad();  // gradients of an earlier check must not add up
  Tensor y = f(inputs);
  Generator gen(fresh_seed());
  Tensor r = randn(y.shape(), gen, TensorOptions(DType::F64).with_device(Device::cpu()));
  sum(mul(y, r)).backward();
  for (size_t k = 0; k < inputs.size(); ++k) {
    const Tensor& x = inputs[k];
    if (!x.defined() || !x.requires_grad()) continue;
    ASSERT_EQ(x.dtype(), DType::F64) << "gradient checks run in f64";
    ASSERT_TRUE(x.grad().defined()) << "input " << k << " received no gradient";
    std::vector<double> analytic = values(x.grad());
    double* data = static_cast<double*>(x.raw_data());
    std::vector<double> numeric(static_cast<size_t>(x.numel()));
    for (int64_t i = 0; i < x.numel(); ++i) {
      double* e = data + offset_of(x, i);
      double saved = *e;
      *e = saved + eps;
      double plus = loss(f, inputs, r);
      *e = saved - eps;
      double minus = loss(f, inputs, r);
      *e = saved;
      numeric[i] = (plus - minus) / (2 * eps);
    }
    const Discrepancy d = compare_values(analytic, numeric);
    EXPECT_LE(d.error, tol) << "input " << k << " of shape " << shape_str(x.shape()) << ": worst gradient error "
                            << d.error << " at " << d.at << " (autograd " << analytic[d.at] << ", finite difference "
                            << numeric[d.at] << ")";
  }
}

}  // namespace testing
}  // namespace tandem
