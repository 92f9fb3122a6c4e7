// A distillation session, the part tools:distill, the demo and the bench share: open the data, start the
// workers (threads of this process, or one per MPI process), profile, plan, run each strategy, and report.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "parallel/bd/plan.h"
#include "parallel/bd/profiler.h"
#include "parallel/bd/runner.h"
#include "parallel/bd/strategy.h"
#include "parallel/bd/train_options.h"
#include "parallel/bd/workload.h"
#include "runtime/formats/json.h"

namespace tandem {
namespace parallel {
namespace bd {

struct SessionOptions {
  WorkloadSpec workload;  // sample shape: filled from the data when empty
  std::string dataset;    // data::open_dataset spec (its training split is used)
  int64_t subset = 0;     // the first N training samples only (0: all)
  TrainOptions train;
  std::string workers = "cpu:4";  // parallel::make_workers spec
  // local: threads of this process; mpi: one worker per MPI process (CPU tensors); nccl: GPUs, NCCL over
  // MPI when launched by mpirun, else in-process; auto: mpi/nccl under mpirun (by device), else local;
  // local-ordered: local, pairing messages in issue order as NCCL does (checks a run's order on CPU workers).
  std::string comm = "auto";
  std::vector<Strategy> strategies = all_strategies();
  int64_t memory_limit = 0;                  // per worker, for the planners (0: none; the pipe-bd model takes none)
  PlanModel plan_model = kDefaultPlanModel;  // the AHD planner's cost model
  std::string plan_path;                     // a hand-written or saved AHD plan (JSON) instead of the planner's
  std::string profile_path;                  // a saved profile (JSON) instead of measuring one
  std::string out_dir;  // profile.json, plan.json, summary.json and one folder per strategy ("": none)
  bool resume = false;
  bool live_progress = false;  // rank 0's live display on stderr while a strategy runs (RunContext)
  ProfileOptions profile;
};

struct SessionReport {
  bool root = false;  // this process holds rank 0 (the one that prints)
  int workers = 0;
  std::string device;    // "4 x cpu", "4 x cuda:0/4", ...
  std::string workload;  // Workload::describe()
  std::string data;      // the dataset's description and what was used of it
  int64_t steps_per_epoch = 0;
  BlockProfile profile;
  Plan pipeline_plan;                        // TR and TR+DPU (absent with more workers than blocks)
  Plan hybrid_plan;                          // TR+DPU+AHD
  PlanModel plan_model = kDefaultPlanModel;  // the model the plans were made with
  std::vector<StrategyResult> results;       // in the order of SessionOptions::strategies
};

// Runs the session. Bad options throw ValueError (or IoError, ShapeError) before any training starts.
// `log` receives rank 0's progress lines.
SessionReport run_session(const SessionOptions& options, const std::function<void(const std::string&)>& log);

// True when this process was started by mpirun/srun (an MPI rank).
bool launched_by_mpi();

// Seconds per step of a pipelined schedule once it is full, from its instructions' times (executed or
// simulated): from the end of its first step (every worker's update done) to the end of its last, over the
// steps between (0 with fewer than two steps or not pipelined).
double pipeline_step_s(const DistillSchedule& d, const std::vector<InstrTime>& times);

// The report as JSON (summary.json): per strategy the measured and simulated times, speedup over DP,
// busy fractions, peak memory, losses, per-rank time breakdown and a timeline of one step.
Json report_json(const SessionReport& report);
// A fixed-width table: strategy, layout, time per epoch, speedup over DP, simulated speedup, busy, memory;
// then, with an AHD run, its plan's step time as both planner models predict it beside the measured one.
std::string report_table(const SessionReport& report);

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
