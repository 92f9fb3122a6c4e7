// The NN ops of runtime/nn/nn_ops.h through the op harness's tests (tests/harness/op_tests.cc): forward against an
// f64 reference (f32 and f64), gradients by finite differences, and CUDA against the CPU.
#include <gtest/gtest.h>

#include "tests/nn/nn_cases.h"

namespace tandem {
namespace testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Conv, OpTest, ::testing::ValuesIn(conv_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Pool, OpTest, ::testing::ValuesIn(pool_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(BatchNorm, OpTest, ::testing::ValuesIn(batch_norm_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(DropoutFormat, OpTest, ::testing::ValuesIn(dropout_format_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Conv, OpGradientTest, ::testing::ValuesIn(differentiable(conv_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(Pool, OpGradientTest, ::testing::ValuesIn(differentiable(pool_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(BatchNorm, OpGradientTest, ::testing::ValuesIn(differentiable(batch_norm_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(DropoutFormat, OpGradientTest, ::testing::ValuesIn(differentiable(dropout_format_cases())),
                         case_name);

}  // namespace
}  // namespace testing
}  // namespace tandem
