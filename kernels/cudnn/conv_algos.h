// How the CUDA backend picks a cuDNN algorithm for a convolution pass: once per shape and process (for the
// kConvAlgoShapes most recently used), from the disk cache of earlier runs (algo_cache.h) where cuDNN still runs
// that choice, else from cuDNN's heuristics
// (cudnnGetConvolution*Algorithm_v7: no GPU work, what PyTorch does by default) or, in benchmark mode
// (TANDEM_CUDNN_BENCHMARK=1, runtime/base/config.h), its exhaustive timed search (cudnnFind*AlgorithmEx:
// seconds per network, the pick of the fastest).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "kernels/cudnn/conv_choice.h"
#include "kernels/cudnn/conv_pass.h"
#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cudnn {

// The most workspace an algorithm may use: a slower algorithm within it beats a faster one beyond it.
constexpr size_t kMaxConvWorkspace = size_t{512} << 20;

// Choices this process keeps (the most recently used; a dropped one is found again, in the disk cache), and
// problems conv_problems_seen records (the first ones): bounds for a long run through ever new shapes.
constexpr size_t kConvAlgoShapes = 4096;

// What a choice depends on: the pass and shape, the device, and the switches in force.
struct ConvProblem {
  ConvPass pass = ConvPass::Forward;
  Conv2dGeometry g;
  int device = 0;
  bool deterministic = false, tf32 = false, benchmark = false;
};

// The choice for `p`: this process's earlier one, else the disk cache's if `runs` (the workspace of an algorithm
// and math type, when cuDNN runs them on this problem) accepts it within kMaxConvWorkspace, else `search`'s
// (heuristics or Find, as p.benchmark says), kept in both. nullopt, remembered too, when cuDNN has no algorithm.
std::optional<ConvChoice> choose_conv(const ConvProblem& p, const WorkspaceQuery& runs,
                                      const std::function<std::optional<ConvChoice>()>& search);

// Counts of this process's choices by where they came from, and of the passes that ran in NCHW for want of a
// channels-last algorithm (tests and reports read them).
struct ConvAlgoStats {
  int64_t heuristic = 0;  // cuDNN's heuristics
  int64_t searched = 0;   // cuDNN's timed search (benchmark mode)
  int64_t from_disk = 0;  // the disk cache
  int64_t fallbacks = 0;  // passes run through NCHW copies
};
ConvAlgoStats conv_algo_stats();
void count_conv_fallback();

// A pass and shape this process asked for an algorithm, and how many convolution passes asked (every pass asks):
// the convolutions a model's steps ran, which bench/conv_api_bench replays.
struct SeenConv {
  ConvPass pass = ConvPass::Forward;
  Conv2dGeometry g;
  int64_t calls = 0;
};
// In the order first asked; one entry per pass, shape and switches in force (deterministic, TF32, benchmark),
// for the first kConvAlgoShapes of them.
std::vector<SeenConv> conv_problems_seen();

// Points the disk cache at `path` ("" keeps nothing; the default is default_algo_cache_path()) and forgets this
// process's choices and what it has seen, as a new process would start. Tests use it.
void set_conv_algo_cache_path(const std::string& path);

}  // namespace cudnn
}  // namespace tandem
