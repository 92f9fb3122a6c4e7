// The five blockwise-distillation strategies and their layouts: which worker trains which blocks, on which rows.
#pragma once

#include <string>
#include <vector>

#include "parallel/bd/plan.h"

namespace tandem {
namespace parallel {
namespace bd {

enum class Strategy {
  DP,   // DNA's baseline: blocks one after another, each data-parallel on every worker
  LS,   // whole blocks per worker (bin packing), full batch, no communication
  TR,   // teacher relaying: one pipeline stage per worker, a global barrier before each update
  DPU,  // TR with decoupled parameter updates (no barrier)
  AHD,  // TR + DPU on the hybrid (pipeline x data-parallel) plan of the AHD planner
};

const char* strategy_name(Strategy s);   // "dp", "ls", "tr", "dpu", "ahd"
const char* strategy_title(Strategy s);  // "DP", "LS", "TR", "TR+DPU", "TR+DPU+AHD"
std::vector<Strategy> all_strategies();
// "dp", "ls", "tr", "dpu", "ahd", comma-separated lists of them, or "all"; ValueError otherwise.
std::vector<Strategy> parse_strategies(const std::string& spec);

// Who does what in one strategy.
struct Layout {
  Strategy strategy = Strategy::DP;
  int workers = 1;
  int blocks = 1;
  // TR, DPU, AHD: contiguous stages (stage i runs on plan.stage_ranks()[i]). DP and LS: empty.
  Plan plan;
  // LS: the blocks each worker trains, one after another. Others: empty.
  std::vector<std::vector<int>> bins;

  bool pipelined() const { return strategy == Strategy::TR || strategy == Strategy::DPU || strategy == Strategy::AHD; }
  // The blocks `worker` trains (DP: all of them).
  std::vector<int> blocks_of(int worker) const;
  // Pipelines: the stage of `worker` and the worker's index among the stage's replicas.
  int stage_of(int worker) const;
  int replica_of(int worker) const;
  std::string describe() const;  // one line: "TR: [blocks 0-1]x1 [blocks 2]x1 ..."
};

Layout dp_layout(int blocks, int workers);
// LS: blocks packed by the cost of training each alone at full batch: its teacher prefix plus its student.
Layout ls_layout(const BlockProfile& profile, int workers);
// TR and DPU on a pure pipeline plan (one worker per stage), AHD on any plan. A plan that does not fit
// (replicated stages for TR/DPU, a worker count other than `workers`) throws ValueError.
Layout pipeline_layout(Strategy strategy, const Plan& plan, int blocks, int workers);

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
