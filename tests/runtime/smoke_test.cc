// First end-to-end checks of the runtime core on the CPU.
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace {

TEST(Smoke, MatmulAndBackward) {
  Generator g(tandem::testing::fresh_seed());
  Tensor a = randn({3, 4}, g).set_requires_grad();
  Tensor b = randn({4, 5}, g).set_requires_grad();
  Tensor y = sum(relu(matmul(a, b)));
  y.backward();
  ASSERT_TRUE(a.grad().defined());
  ASSERT_EQ(a.grad().shape(), (Shape{3, 4}));
  // Check against a hand computation in double.
  auto av = a.to_vector<double>(), bv = b.to_vector<double>();
  std::vector<double> ga(12, 0.0);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 5; ++j) {
      double s = 0;
      for (int k = 0; k < 4; ++k) s += av[i * 4 + k] * bv[k * 5 + j];
      if (s > 0)
        for (int k = 0; k < 4; ++k) ga[i * 4 + k] += bv[k * 5 + j];
    }
  auto got = a.grad().to_vector<double>();
  for (int i = 0; i < 12; ++i) EXPECT_NEAR(got[i], ga[i], 1e-4);
}

}  // namespace
}  // namespace tandem

namespace tandem {
namespace {

TEST(Smoke, ReluAndRelu6PropagateNaNLikePyTorch) {
  Tensor x = from_vector<float>({NAN, -1.f, 3.f, 7.f}, {4});
  auto r = relu(x).to_vector<float>();
  auto r6 = relu6(x).to_vector<float>();
  EXPECT_TRUE(std::isnan(r[0]));
  EXPECT_TRUE(std::isnan(r6[0]));
  EXPECT_EQ(r[1], 0.f);
  EXPECT_EQ(r6[3], 6.f);
  EXPECT_EQ(r[2], 3.f);
}

}  // namespace
}  // namespace tandem
