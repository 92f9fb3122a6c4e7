// Pooling on the CPU beyond its op cases (nn_cases_pool.cc): NaN propagation, ties and error paths.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>

#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

TEST(Pool2d, MaxPoolPropagatesNaN) {
  std::vector<double> v = {1.0, std::nan(""), 3.0, 2.0};
  Tensor y = max_pool2d(from_vector(v, {1, 1, 2, 2}), Pool2dOptions{2, 2, 2, 2, 0, 0, false, true});
  EXPECT_TRUE(std::isnan(y.item<double>()));
}

TEST(Pool2d, MaxPoolTiesGoToTheFirstMaximum) {
  Tensor x = ones({1, 1, 3, 3}, DType::F64).set_requires_grad();
  Tensor y = max_pool2d(x, Pool2dOptions{2, 2, 1, 1, 0, 0, false, true});  // four overlapping windows of equal values
  sum(y).backward();
  EXPECT_EQ(x.grad().to_vector<double>(), (std::vector<double>{1, 1, 0, 1, 1, 0, 0, 0, 0}));
}

TEST(Pool2d, RejectsBadArguments) {
  Generator gen(testing::fresh_seed());
  Tensor x = randn({1, 2, 5, 5}, gen, DType::F32);
  EXPECT_THROW(max_pool2d(x, Pool2dOptions{2, 2, 2, 2, 2, 0, false, true}), ValueError);  // padding > kernel / 2
  EXPECT_THROW(avg_pool2d(x, Pool2dOptions{2, 2, 0, 1, 0, 0, false, true}), ValueError);  // stride 0
  EXPECT_THROW(max_pool2d(x, Pool2dOptions{0, 2, 1, 1, 0, 0, false, true}), ValueError);  // empty kernel
  EXPECT_THROW(max_pool2d(x, Pool2dOptions{6, 2, 1, 1, 0, 0, false, true}), ShapeError);  // kernel over the input
  EXPECT_THROW(max_pool2d(x.flatten(2), Pool2dOptions{2, 2, 2, 2, 0, 0, false, true}), ShapeError);
  EXPECT_THROW(avg_pool2d(x.to(DType::I64), Pool2dOptions{2, 2, 2, 2, 0, 0, false, true}), DTypeError);
  EXPECT_THROW(global_avg_pool2d(x.flatten(2)), ShapeError);
}

}  // namespace
}  // namespace tandem
