// Every op of runtime/tensor/ops.h and every Tensor view/copy through the op harness's tests
// (tests/harness/op_tests.cc): forward against a double-precision reference (f32 and f64), gradients by finite
// differences, and CUDA against the CPU.
#include <gtest/gtest.h>

#include "tests/runtime/op_cases.h"

namespace tandem {
namespace testing {
namespace {

INSTANTIATE_TEST_SUITE_P(Elementwise, OpTest, ::testing::ValuesIn(elementwise_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Reduction, OpTest, ::testing::ValuesIn(reduction_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Linalg, OpTest, ::testing::ValuesIn(linalg_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(JoinIndex, OpTest, ::testing::ValuesIn(join_index_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(ViewCopy, OpTest, ::testing::ValuesIn(view_copy_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Elementwise, OpGradientTest, ::testing::ValuesIn(differentiable(elementwise_cases())),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Reduction, OpGradientTest, ::testing::ValuesIn(differentiable(reduction_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(Linalg, OpGradientTest, ::testing::ValuesIn(differentiable(linalg_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(JoinIndex, OpGradientTest, ::testing::ValuesIn(differentiable(join_index_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(ViewCopy, OpGradientTest, ::testing::ValuesIn(differentiable(view_copy_cases())), case_name);

}  // namespace
}  // namespace testing
}  // namespace tandem
