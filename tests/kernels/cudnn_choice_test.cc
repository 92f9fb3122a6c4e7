// Tests of the cuDNN convolution algorithm choice (kernels/cudnn/conv_choice.h) on made-up Find results: the
// workspace is the one of the algorithm and math type that will run. Runs everywhere (no GPU is used).
#include <gtest/gtest.h>

#include <map>
#include <optional>
#include <utility>
#include <vector>

#include "kernels/cudnn/conv_choice.h"

namespace tandem {
namespace cudnn {
namespace {

cudnnConvolutionFwdAlgoPerf_t result(int algo, cudnnMathType_t math, size_t memory, bool det = true,
                                     cudnnStatus_t status = CUDNN_STATUS_SUCCESS) {
  cudnnConvolutionFwdAlgoPerf_t r{};
  r.algo = static_cast<cudnnConvolutionFwdAlgo_t>(algo);
  r.status = status;
  r.time = 1;
  r.memory = memory;
  r.determinism = det ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
  r.mathType = math;
  return r;
}

// cudnnGetConvolutionForwardWorkspaceSize as a table: (algo, math) -> bytes; pairs not listed are not supported.
struct Sizes {
  std::map<std::pair<int, cudnnMathType_t>, size_t> bytes;
  std::vector<std::pair<int, cudnnMathType_t>> asked;
  WorkspaceQuery query() {
    return [this](int algo, cudnnMathType_t math, size_t* out) {
      asked.emplace_back(algo, math);
      auto it = bytes.find({algo, math});
      if (it == bytes.end()) return CUDNN_STATUS_NOT_SUPPORTED;
      *out = it->second;
      return CUDNN_STATUS_SUCCESS;
    };
  }
};

constexpr size_t kLimit = 1 << 20;

// EXPECTs that a choice was made: algorithm `algo`, run under `math` with a workspace of `workspace` bytes.
void expect_chosen(const std::optional<ConvChoice>& c, int algo, cudnnMathType_t math, size_t workspace) {
  ASSERT_TRUE(c.has_value());
  EXPECT_EQ(c->algo, algo);
  EXPECT_EQ(c->math, math);
  EXPECT_EQ(c->workspace, workspace);
}

TEST(CudnnChoice, WorkspaceIsTheOneOfTheMathTypeThatRuns) {
  // TF32 off: Find's fastest result was timed (and sized) with the default math type, which may use tensor
  // cores; it runs with FMA math, whose kernels need another workspace.
  const std::vector<cudnnConvolutionFwdAlgoPerf_t> found = {result(1, CUDNN_DEFAULT_MATH, 0)};
  Sizes sizes;
  sizes.bytes[{1, CUDNN_FMA_MATH}] = 4096;
  sizes.bytes[{1, CUDNN_DEFAULT_MATH}] = 0;
  // The workspace of algorithm 1 under FMA math, not Find's under default math.
  expect_chosen(choose_conv_algorithm(found.data(), 1, false, CUDNN_FMA_MATH, kLimit, sizes.query()), 1, CUDNN_FMA_MATH,
                4096);
}

TEST(CudnnChoice, ResultsTimedWithTheRequestedMathComeFirst) {
  // Find's order is by time under each result's own math type: a default-math result is only as fast as
  // measured if it may use TF32, so under FMA math the results timed with FMA are preferred.
  const std::vector<cudnnConvolutionFwdAlgoPerf_t> found = {result(1, CUDNN_DEFAULT_MATH, 0),
                                                            result(0, CUDNN_FMA_MATH, 64)};
  Sizes sizes;
  sizes.bytes[{0, CUDNN_FMA_MATH}] = 64;
  sizes.bytes[{1, CUDNN_FMA_MATH}] = 0;
  expect_chosen(choose_conv_algorithm(found.data(), 2, false, CUDNN_FMA_MATH, kLimit, sizes.query()), 0, CUDNN_FMA_MATH,
                64);
}

TEST(CudnnChoice, SkipsWhatCannotRunAsChosen) {
  const std::vector<cudnnConvolutionFwdAlgoPerf_t> found = {
      result(5, CUDNN_DEFAULT_MATH, 0),                               // no FMA kernel: not supported
      result(6, CUDNN_DEFAULT_MATH, 0),                               // its FMA workspace is too big
      result(7, CUDNN_FMA_MATH, 0, /*det=*/false),                    // not deterministic
      result(8, CUDNN_FMA_MATH, 0, true, CUDNN_STATUS_ALLOC_FAILED),  // failed in Find
      result(2, CUDNN_DEFAULT_MATH, 0)};
  Sizes sizes;
  sizes.bytes[{6, CUDNN_FMA_MATH}] = 2 * kLimit;
  sizes.bytes[{7, CUDNN_FMA_MATH}] = 0;
  sizes.bytes[{8, CUDNN_FMA_MATH}] = 0;
  sizes.bytes[{2, CUDNN_FMA_MATH}] = 512;
  expect_chosen(choose_conv_algorithm(found.data(), 5, true, CUDNN_FMA_MATH, kLimit, sizes.query()), 2, CUDNN_FMA_MATH,
                512);
  EXPECT_FALSE(choose_conv_algorithm(found.data(), 4, true, CUDNN_FMA_MATH, kLimit, sizes.query()).has_value());
}

TEST(CudnnChoice, TensorOpResultsKeepTheirMathAndItsWorkspace) {
  // TF32 allowed: a result runs with the math type Find timed it with; the workspace asked is for that type.
  const std::vector<cudnnConvolutionFwdAlgoPerf_t> found = {result(1, CUDNN_TENSOR_OP_MATH, 256),
                                                            result(0, CUDNN_DEFAULT_MATH, 0)};
  Sizes sizes;
  sizes.bytes[{1, CUDNN_TENSOR_OP_MATH}] = 256;
  expect_chosen(choose_conv_algorithm(found.data(), 2, false, CUDNN_TENSOR_OP_MATH, kLimit, sizes.query()), 1,
                CUDNN_TENSOR_OP_MATH, 256);
  for (const auto& [algo, math] : sizes.asked) EXPECT_EQ(math, CUDNN_TENSOR_OP_MATH) << "algorithm " << algo;
}

}  // namespace
}  // namespace cudnn
}  // namespace tandem
