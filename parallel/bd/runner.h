// Running a strategy: every rank (SPMD) builds the same schedule and executes its own instructions with a
// parallel::Executor — loads, teacher blocks (no grad), relays, student forward/backward, all-reduces,
// barriers and per-block optimizer steps — then all ranks gather the timings, memory peaks and losses.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/transforms.h"
#include "parallel/bd/bd_schedule.h"
#include "parallel/bd/compute_graphs.h"
#include "parallel/bd/train_options.h"
#include "parallel/bd/workload.h"
#include "parallel/communicator.h"
#include "parallel/executor.h"
#include "parallel/worker.h"

namespace tandem {
namespace parallel {
namespace bd {

// What every rank of a run shares (read-only; one per process).
struct RunContext {
  const Workload* workload = nullptr;
  std::shared_ptr<const data::Dataset> dataset;  // the training split
  TrainOptions train;
  // Where the strategy's files go: block<j>.safetensors (training checkpoints, written at each epoch end),
  // student.safetensors (the stitched student) and trace.json. "": no files.
  std::string out_dir;
  bool resume = false;  // continue from the block checkpoints in out_dir
  // Progress lines (rank 0 only): one per epoch end of a block rank 0 trains.
  std::function<void(const std::string&)> log;
  // Rank 0 shows the live display of runtime/progress/progress.h on stderr: its block updates done of its total,
  // batch rows per second and the time left.
  bool live_progress = false;
};

// Steps per epoch: the full batches of the dataset, capped by train.steps_per_epoch. Throws ValueError when
// the dataset holds fewer than one batch.
int64_t steps_per_epoch(const RunContext& ctx);

struct StrategyResult {
  Strategy strategy = Strategy::DP;
  std::string layout;                     // Layout::describe()
  DistillSchedule schedule;               // as executed (with costs when a profile was given)
  std::vector<InstrTime> times;           // every instruction, seconds from the common start
  int64_t epochs_run = 0;                 // epochs per block executed by this run
  double wall_s = 0;                      // first instruction start to last instruction end
  double epoch_s = 0;                     // wall_s / epochs_run
  double simulated_s = 0;                 // simulate() makespan of the same schedule (0 without a profile)
  std::vector<double> busy_fraction;      // per worker: load, teacher, student and update time / wall_s
  std::vector<int64_t> peak_memory;       // per worker: peak bytes of its memory tracker during the run
  std::vector<std::vector<double>> loss;  // [block][epoch]: mean loss over the epoch's steps (full batch)
  // Summed over the ranks: bytes of the teacher activations relayed (sent; in the policy's activation dtype) and
  // of the student gradients all-reduced (each rank's buffer; f32, the dtype of the f32 weights' gradients).
  int64_t relay_bytes = 0, all_reduce_bytes = 0;
  // With train.cuda_graph, summed over the ranks: compute instructions run eagerly, graphs captured, replays.
  GraphCounts graphs;
  // This rank's trained blocks (the copy it saves: DP rank 0, LS owners, replica 0 of pipeline stages).
  std::map<int, NamedTensors> local_blocks;
};

// Runs `layout` on this rank; every rank of `world` calls it with the same arguments (and its own worker,
// whose rank must equal world.rank()). `costs` (may be null) times the schedule for the simulator.
// `signals` (same ranks as `world`; null: `world`) carries the executor's dependency signals, e.g. TR+DPU's
// "the next stage has taken my previous relay". It must be set when `world` needs one issuer (NCCL): a
// signal there would hold the relay stream until received, and replicated stages would deadlock (a relay
// waits behind a signal to a replica that waits in its group's all-reduce for a replica whose relay waits).
StrategyResult run_strategy(const RunContext& ctx, const Layout& layout, const BlockProfile* costs, Worker& worker,
                            Communicator& world, Communicator* signals = nullptr);

// Per worker, seconds spent on the compute lane in each kind of work of a run: "load", "teacher", "student",
// "update", "comm" (receives, all-reduces, barriers) and "idle" (the rest of wall_s).
std::vector<std::map<std::string, double>> time_breakdown(const StrategyResult& r);

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
