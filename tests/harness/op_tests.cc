// The parametrized tests of the op harness, instantiated by each suite of cases (tests/runtime, tests/nn):
// forward against the reference (f32 and f64), gradients by finite differences, and CUDA against the CPU.
#include <gtest/gtest.h>

#include "tests/harness/op_harness.h"

namespace tandem {
namespace testing {

TEST_P(OpTest, ForwardF32) { check_forward(GetParam(), DType::F32); }
TEST_P(OpTest, ForwardF64) { check_forward(GetParam(), DType::F64); }

TEST_P(OpTest, CudaMatchesCpuF32) {
  TD_REQUIRE_GPU();
  check_cuda_matches_cpu(GetParam(), DType::F32);
}

TEST_P(OpTest, CudaMatchesCpuF64) {
  TD_REQUIRE_GPU();
  check_cuda_matches_cpu(GetParam(), DType::F64);
}

// Gradients only for the differentiable cases (no test is generated for the others).
TEST_P(OpGradientTest, Gradient) { check_gradient(GetParam()); }

std::vector<OpCase> differentiable(std::vector<OpCase> cases) {
  std::vector<OpCase> out;
  for (OpCase& c : cases)
    if (c.grad) out.push_back(std::move(c));
  return out;
}

}  // namespace testing
}  // namespace tandem
