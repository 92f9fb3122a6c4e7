// Choosing a cuDNN convolution algorithm, its math type and workspace from the ranked results of cuDNN's
// heuristics (cudnnGetConvolution*Algorithm_v7) or timed search (cudnnFind*AlgorithmEx) (apart from conv.cc, so
// that the rule is checked without a GPU).
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <functional>
#include <optional>

namespace tandem {
namespace cudnn {

struct ConvChoice {
  int algo = 0;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  size_t workspace = 0;
};

// The workspace cudnnGet*WorkspaceSize reports for `algo` with the convolution's math type set to `math`.
using WorkspaceQuery = std::function<cudnnStatus_t(int algo, cudnnMathType_t math, size_t* bytes)>;

// The first successful result in cuDNN's order (fastest first, measured or expected) that is deterministic when
// `det` and that runs with the math type it gets, its workspace (asked of `workspace_of` for that math type)
// within `max_workspace`. A result runs with the math type it was ranked under, except under CUDNN_FMA_MATH (TF32
// off), where every choice keeps FMA math: results ranked under FMA come first, as the others' ranks may be TF32
// ones. A result's `memory` is not used: it is the workspace of its own math type, which may not be the one that
// runs.
template <typename Perf>
std::optional<ConvChoice> choose_conv_algorithm(const Perf* results, int count, bool det, cudnnMathType_t requested,
                                                size_t max_workspace, const WorkspaceQuery& workspace_of) {
  const bool fma = requested == CUDNN_FMA_MATH;
  for (int pass = 0; pass < (fma ? 2 : 1); ++pass) {
    for (int i = 0; i < count; ++i) {
      const Perf& r = results[i];
      if (fma && (r.mathType == CUDNN_FMA_MATH) != (pass == 0)) continue;
      if (r.status != CUDNN_STATUS_SUCCESS || (det && r.determinism != CUDNN_DETERMINISTIC)) continue;
      ConvChoice c;
      c.algo = static_cast<int>(r.algo);
      c.math = fma ? CUDNN_FMA_MATH : r.mathType;
      if (workspace_of(c.algo, c.math, &c.workspace) != CUDNN_STATUS_SUCCESS || c.workspace > max_workspace) continue;
      return c;
    }
  }
  return std::nullopt;
}

}  // namespace cudnn
}  // namespace tandem
