// The tests' own checks (tests/testing.h: compare_values, expect_close, error_of, expect_error) fed the errors they
// exist to catch.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using testing::compare_values;
using testing::expect_close;

const double kInf = INFINITY, kNaN = NAN;

TEST(Comparison, AnInfiniteReferenceIsMatchedOnlyByTheSameInfinity) {
  // inf / inf is NaN, which a running std::max drops: a finite value against an infinite reference once passed.
  EXPECT_EQ(compare_values({1.0, 2.0}, {1.0, kInf}).error, kInf);
  EXPECT_EQ(compare_values({1.0, 2.0}, {1.0, kInf}).at, 1u);
  EXPECT_EQ(compare_values({1.0, -kInf}, {1.0, kInf}).error, kInf);
  EXPECT_EQ(compare_values({1.0, kInf}, {1.0, 2.0}).error, kInf);
  EXPECT_EQ(compare_values({kInf, -kInf, 3.0}, {kInf, -kInf, 3.0}).error, 0.0);
  EXPECT_NONFATAL_FAILURE(expect_close(from_vector<double>({1, 2}, {2}), from_vector<double>({1, kInf}, {2}), 1e-3),
                          "relative error inf");
  const float inf = std::numeric_limits<float>::infinity();
  expect_close(from_vector<float>({1, inf}, {2}), from_vector<float>({1, inf}, {2}), 0.0, "equal infinities");
}

TEST(Comparison, NaNMatchesOnlyNaN) {
  EXPECT_EQ(compare_values({kNaN, 1.0}, {0.5, 1.0}).error, kInf);
  EXPECT_EQ(compare_values({0.5, 1.0}, {kNaN, 1.0}).error, kInf);
  EXPECT_EQ(compare_values({kInf, 1.0}, {kNaN, 1.0}).error, kInf);
  EXPECT_EQ(compare_values({kNaN, 1.0}, {kNaN, 1.0}).error, 0.0);
  EXPECT_NONFATAL_FAILURE(expect_close(from_vector<float>({kNaN}, {1}), from_vector<float>({0}, {1}), 1.0), "");
}

TEST(Comparison, SmallTensorsAreHeldToTheirOwnScale) {
  // Gradients of about 6e-3, off by 1%: with a max(1, |want|) denominator that read as 6e-5 and passed a 1e-3
  // tolerance; relative to the tensor's magnitude it is 1e-2.
  std::vector<double> want = {6e-3, -4e-3, 1e-3}, got = {6.06e-3, -4e-3, 1e-3};
  EXPECT_NEAR(compare_values(got, want).error, 1e-2, 1e-12);
  EXPECT_NONFATAL_FAILURE(expect_close(from_vector(got, {3}), from_vector(want, {3}), 1e-3), "relative error 0.01");
  // The same relative error on values around 1 and 1000 reads the same.
  for (double scale : {1.0, 1e3}) {
    std::vector<double> w = want, g = got;
    for (double& v : w) v *= scale / 6e-3;
    for (double& v : g) v *= scale / 6e-3;
    EXPECT_NEAR(compare_values(g, w).error, 1e-2, 1e-9) << "scale " << scale;
  }
}

TEST(Comparison, AnElementNearZeroIsHeldToItsTensorsPrecision) {
  // An error of 1e-6 on an element of 1e-5 in a tensor of magnitude 10: 1e-7 relative to the tensor, what
  // rounding leaves in a sum of terms of that size that cancels, and no worse than the tensor's largest element.
  EXPECT_NEAR(compare_values({10.0, 1.1e-5}, {10.0, 1e-5}).error, 1e-7, 1e-15);
  EXPECT_EQ(compare_values({10.0, 1.1e-5}, {10.0, 1e-5}).at, 1u);
  // The largest error is found wherever it is.
  EXPECT_NEAR(compare_values({1.0, 2.0, 3.3, 4.0}, {1.0, 2.0, 3.0, 4.0}).error, 0.3 / 4, 1e-12);
  EXPECT_EQ(compare_values({1.0, 2.0, 3.3, 4.0}, {1.0, 2.0, 3.0, 4.0}).at, 2u);
}

TEST(Comparison, APartOfALargerWholeCanBeHeldToTheWholesScale) {
  // A gradient that is mathematically zero holds rounding of the model's gradient magnitude (here 0.5): against
  // its own magnitude that is an error of order 1, against the model's 1e-15.
  std::vector<double> want = {3e-16, -2e-16}, got = {-1e-16, 1e-16};
  EXPECT_GT(compare_values(got, want).error, 1.0);
  EXPECT_NEAR(compare_values(got, want, 0.5).error, 8e-16, 1e-20);
  EXPECT_NEAR(testing::max_rel_error(from_vector(got, {2}), from_vector(want, {2}), 0.5), 8e-16, 1e-20);
  EXPECT_EQ(testing::max_magnitude(from_vector<double>({1.0, -3.0, kInf, kNaN}, {4})), 3.0);
  // Non-finite elements still match only exactly.
  EXPECT_EQ(compare_values({1.0, 0.0}, {kInf, 0.0}, 0.5).error, kInf);
}

TEST(Comparison, AnAllZeroReferenceAcceptsOnlyZeros) {
  EXPECT_EQ(compare_values({0.0, 0.0}, {0.0, 0.0}).error, 0.0);
  EXPECT_EQ(compare_values({0.0, 1e-30}, {0.0, 0.0}).error, kInf);
}

TEST(Comparison, ALengthMismatchIsAnError) { EXPECT_EQ(compare_values({1.0}, {1.0, 2.0}).error, kInf); }

TEST(Comparison, ExpectCloseChecksShapesAndPassesWithinTolerance) {
  EXPECT_FATAL_FAILURE(expect_close(zeros({2, 3}), zeros({3, 2}), 1.0), "shapes");
  expect_close(from_vector<double>({2.0, -1.0}, {2}), from_vector<double>({2.0, -1.0 + 1e-9}, {2}), 1e-9, "within");
}

TEST(ExpectedErrors, NoErrorAnotherTypeOrAMissingPartFails) {
  const auto bad_width = [] { throw ValueError("bad width 3", "w > 0", "layer.cc", 7); };
  EXPECT_EQ(testing::error_of<ValueError>(bad_width), "bad width 3 [w > 0 failed at layer.cc:7]");
  testing::expect_error<ValueError>(bad_width, {"bad width", "3", "layer.cc:7"});
  testing::expect_error<Error>(bad_width, "width");  // a base class catches too
  EXPECT_NONFATAL_FAILURE(testing::expect_error<ValueError>([] {}, "bad"), "nothing was thrown");
  EXPECT_NONFATAL_FAILURE(testing::expect_error<ShapeError>(bad_width, "bad"), "threw the wrong type: bad width 3");
  EXPECT_NONFATAL_FAILURE((testing::expect_error<ValueError>(bad_width, {"bad width", "4"})), "message: bad width 3");
}

}  // namespace
}  // namespace tandem
