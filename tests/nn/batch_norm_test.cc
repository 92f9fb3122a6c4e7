// batch_norm's error paths (its forward, running statistics and gradients are op cases, nn_cases_batch_norm.cc).
#include <gtest/gtest.h>

#include <cmath>

#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

TEST(BatchNorm, RejectsBadArguments) {
  Generator gen(testing::fresh_seed());
  Tensor x = randn({4, 3, 2, 2}, gen, DType::F32);
  Tensor v3 = randn({3}, gen, DType::F32), rv = ones({3});
  EXPECT_THROW(batch_norm(x, randn({4}, gen, DType::F32), v3, v3, rv, true, 0.1, 1e-5), ShapeError);
  EXPECT_THROW(batch_norm(x, v3.to(DType::F64), v3, v3, rv, true, 0.1, 1e-5), DTypeError);
  EXPECT_THROW(batch_norm(x, v3, v3, Tensor(), Tensor(), false, 0.1, 1e-5), ValueError);  // eval, no stats
  EXPECT_THROW(batch_norm(x, v3, v3, v3, Tensor(), true, 0.1, 1e-5), ValueError);         // half the stats
  EXPECT_THROW(batch_norm(randn({1, 3}, gen, DType::F32), v3, v3, v3, rv, true, 0.1, 1e-5), ShapeError);
  EXPECT_THROW(batch_norm(x.flatten(2), v3, v3, v3, rv, true, 0.1, 1e-5), ShapeError);  // 3-D
  EXPECT_THROW(batch_norm(x.to(DType::I32), Tensor(), Tensor(), Tensor(), Tensor(), true, 0.1, 1e-5), DTypeError);
  EXPECT_THROW(batch_norm(x, v3, v3, v3, rv, true, 0.1, 0.0), ValueError);  // eps
}

}  // namespace
}  // namespace tandem
