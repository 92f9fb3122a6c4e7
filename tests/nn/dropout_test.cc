// dropout on the CPU beyond its op cases (nn_cases_dropout_format.cc): the generator's offset, the kept
// fraction, reproducibility, channels-last gradients, the identity cases and error paths.
#include <gtest/gtest.h>

#include "runtime/base/error.h"
#include "runtime/base/philox.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "tests/harness/gradient_check.h"
#include "tests/nn/nn_cases.h"
#include "tests/testing.h"

namespace tandem {
namespace {

TEST(Dropout, MaskComesFromPhiloxAndKeptValuesAreScaled) {
  Generator data(testing::fresh_seed());
  Tensor x = randn({7, 13}, data, DType::F64);
  const uint64_t seed = testing::fresh_seed();
  Generator gen(seed, 5);
  const double p = 0.3;
  Tensor y = dropout(x, p, true, gen);
  EXPECT_EQ(gen.offset(), 5u + (91 + 3) / 4);  // the generator advanced past the mask's counters
  std::vector<double> xv = x.to_vector<double>(), yv = y.to_vector<double>();
  for (int64_t i = 0; i < 91; ++i) {
    double expected = testing::philox_kept(seed, 5, i, p) ? xv[i] * (1.0 / (1.0 - p)) : 0.0;
    EXPECT_EQ(yv[i], expected) << "element " << i;
  }
}

TEST(Dropout, KeepsAboutOneMinusP) {
  Generator gen(testing::fresh_seed());
  Tensor y = dropout(ones({200000}), 0.25, true, gen);
  double kept_fraction = 0;
  for (double v : y.to_vector<double>()) kept_fraction += v != 0 ? 1 : 0;
  kept_fraction /= 200000.0;
  EXPECT_NEAR(kept_fraction, 0.75, 0.005);
}

TEST(Dropout, SameGeneratorStateSameMask) {
  const uint64_t seed = testing::fresh_seed();
  Tensor x = ones({64}, DType::F32);
  Generator a(seed), b(seed);
  testing::expect_bitwise_equal(dropout(x, 0.5, true, a), dropout(x, 0.5, true, b), "same state");
  Tensor first = dropout(x, 0.5, true, a), second = dropout(x, 0.5, true, a);
  EXPECT_NE(first.to_vector<double>(), second.to_vector<double>()) << "a generator that advanced must give a new mask";
}

TEST(Dropout, IdentityCases) {
  Generator gen(testing::fresh_seed());
  Tensor x = randn({4, 5}, gen, DType::F64);
  EXPECT_TRUE(dropout(x, 0.5, false, gen).same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, gen).same(x));
  for (double v : dropout(x, 1.0, true, gen).to_vector<double>()) EXPECT_EQ(v, 0.0);
}

// In NCHW an op case (nn_cases_dropout_format.cc); a channels-last leaf here.
TEST(Dropout, GradientsWithFixedMaskChannelsLast) {
  Generator data(testing::fresh_seed());
  Tensor x = to_channels_last(randn({2, 3, 4, 5}, data, DType::F64)).set_requires_grad();
  const uint64_t seed = testing::fresh_seed();
  testing::expect_gradients_match(
      [seed](const std::vector<Tensor>& in) {
        Generator gen(seed);  // the same mask on every evaluation
        return dropout(in[0], 0.4, true, gen);
      },
      {x});
  Generator gen(seed);
  EXPECT_TRUE(is_channels_last(dropout(x, 0.4, true, gen)));
}

TEST(Dropout, RejectsBadArguments) {
  Generator gen(testing::fresh_seed());
  Tensor x = randn({4}, gen, DType::F32);
  EXPECT_THROW(dropout(x, -0.1, true, gen), ValueError);
  EXPECT_THROW(dropout(x, 1.5, true, gen), ValueError);
  EXPECT_THROW(dropout(x.to(DType::I32), 0.5, true, gen), DTypeError);
}

}  // namespace
}  // namespace tandem
