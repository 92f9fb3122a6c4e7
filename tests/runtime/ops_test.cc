// Every op of runtime/tensor/ops.h and every Tensor view/copy, one parametrized test per case: forward against a
// double-precision reference (f32 and f64), gradients by finite differences, and CUDA against the CPU.
#include <gtest/gtest.h>

#include "tests/runtime/op_cases.h"

namespace tandem {
namespace testing {
namespace {

class OpTest : public ::testing::TestWithParam<OpCase> {};

TEST_P(OpTest, ForwardF32) { check_forward(GetParam(), DType::F32); }
TEST_P(OpTest, ForwardF64) { check_forward(GetParam(), DType::F64); }

// Gradients only for the differentiable cases (no test is generated for the others).
class OpGradientTest : public ::testing::TestWithParam<OpCase> {};
TEST_P(OpGradientTest, Gradient) { check_gradient(GetParam()); }

std::vector<OpCase> differentiable(std::vector<OpCase> cases) {
  std::vector<OpCase> out;
  for (OpCase& c : cases)
    if (c.grad) out.push_back(std::move(c));
  return out;
}

TEST_P(OpTest, CudaMatchesCpuF32) {
  TD_REQUIRE_GPU();
  check_cuda_matches_cpu(GetParam(), DType::F32);
}

TEST_P(OpTest, CudaMatchesCpuF64) {
  TD_REQUIRE_GPU();
  check_cuda_matches_cpu(GetParam(), DType::F64);
}

INSTANTIATE_TEST_SUITE_P(Elementwise, OpTest, ::testing::ValuesIn(elementwise_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Reduction, OpTest, ::testing::ValuesIn(reduction_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Linalg, OpTest, ::testing::ValuesIn(linalg_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(JoinIndex, OpTest, ::testing::ValuesIn(join_index_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(ViewCopy, OpTest, ::testing::ValuesIn(view_copy_cases()), case_name);
INSTANTIATE_TEST_SUITE_P(Elementwise, OpGradientTest, ::testing::ValuesIn(differentiable(elementwise_cases())),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Reduction, OpGradientTest, ::testing::ValuesIn(differentiable(reduction_cases())),
                         case_name);
INSTANTIATE_TEST_SUITE_P(Linalg, OpGradientTest, ::testing::ValuesIn(differentiable(linalg_cases())), case_name);
INSTANTIATE_TEST_SUITE_P(JoinIndex, OpGradientTest, ::testing::ValuesIn(differentiable(join_index_cases())),
                         case_name);
INSTANTIATE_TEST_SUITE_P(ViewCopy, OpGradientTest, ::testing::ValuesIn(differentiable(view_copy_cases())),
                         case_name);

}  // namespace
}  // namespace testing
}  // namespace tandem
