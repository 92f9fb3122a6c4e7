// dropout on the CPU: masks from the Philox stream, scaling, reproducibility, gradients with a fixed mask,
// the identity cases and error paths.
#include <gtest/gtest.h>

#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "runtime/base/philox.h"
#include "tests/nn/nn_test_util.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using testing::random_input;
using testing::values;

// Whether element i is kept: value i of the stream (seed, first counter), 32-bit uniform, is >= p.
bool kept(uint64_t seed, uint64_t counter, int64_t i, double p) {
  philox::Block b = philox::generate(seed, counter + static_cast<uint64_t>(i / 4));
  return philox::uniform32(b.x[i % 4]) >= p;
}

TEST(Dropout, MaskComesFromPhiloxAndKeptValuesAreScaled) {
  Generator data(testing::fresh_seed());
  Tensor x = random_input({7, 13}, data);
  const uint64_t seed = testing::fresh_seed();
  Generator gen(seed, 5);
  const double p = 0.3;
  Tensor y = dropout(x, p, true, gen);
  EXPECT_EQ(gen.offset(), 5u + (91 + 3) / 4);  // the generator advanced past the mask's counters
  std::vector<double> xv = values(x), yv = values(y);
  for (int64_t i = 0; i < 91; ++i) {
    double expected = kept(seed, 5, i, p) ? xv[i] * (1.0 / (1.0 - p)) : 0.0;
    EXPECT_EQ(yv[i], expected) << "element " << i;
  }
}

TEST(Dropout, KeepsAboutOneMinusP) {
  Generator gen(testing::fresh_seed());
  Tensor y = dropout(ones({200000}), 0.25, true, gen);
  double kept_fraction = 0;
  for (double v : values(y)) kept_fraction += v != 0 ? 1 : 0;
  kept_fraction /= 200000.0;
  EXPECT_NEAR(kept_fraction, 0.75, 0.005);
}

TEST(Dropout, SameGeneratorStateSameMask) {
  const uint64_t seed = testing::fresh_seed();
  Tensor x = ones({64}, DType::F32);
  Generator a(seed), b(seed);
  testing::expect_bitwise_equal(dropout(x, 0.5, true, a), dropout(x, 0.5, true, b), "same state");
  Tensor first = dropout(x, 0.5, true, a), second = dropout(x, 0.5, true, a);
  EXPECT_NE(values(first), values(second)) << "a generator that advanced must give a new mask";
}

TEST(Dropout, IdentityCases) {
  Generator gen(testing::fresh_seed());
  Tensor x = random_input({4, 5}, gen);
  EXPECT_TRUE(dropout(x, 0.5, false, gen).same(x));
  EXPECT_TRUE(dropout(x, 0.0, true, gen).same(x));
  for (double v : values(dropout(x, 1.0, true, gen))) EXPECT_EQ(v, 0.0);
}

TEST(Dropout, GradientsWithFixedMask) {
  for (bool cl : {false, true}) {
    Generator data(testing::fresh_seed());
    Tensor x = random_input({2, 3, 4, 5}, data);
    if (cl) x = to_channels_last(x);
    x.set_requires_grad();
    const uint64_t seed = testing::fresh_seed();
    testing::expect_gradients_match(
        [seed](const std::vector<Tensor>& in) {
          Generator gen(seed);  // the same mask on every evaluation
          return dropout(in[0], 0.4, true, gen);
        },
        {x});
    Generator gen(seed);
    EXPECT_EQ(is_channels_last(dropout(x, 0.4, true, gen)), cl);
  }
}

TEST(Dropout, RejectsBadArguments) {
  Generator gen(testing::fresh_seed());
  Tensor x = random_input({4}, gen, DType::F32);
  EXPECT_THROW(dropout(x, -0.1, true, gen), ValueError);
  EXPECT_THROW(dropout(x, 1.5, true, gen), ValueError);
  EXPECT_THROW(dropout(x.to(DType::I32), 0.5, true, gen), DTypeError);
}

}  // namespace
}  // namespace tandem
