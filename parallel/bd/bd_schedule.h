// Pipe-BD schedules: each strategy's training run as per-worker instruction lists (parallel::Schedule), the
// row slices relayed between replicated stages, and the cost model that times them for the simulator.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/bd/plan.h"
#include "parallel/bd/strategy.h"
#include "parallel/schedule.h"

namespace tandem {
namespace parallel {
namespace bd {

// Rows of a relayed activation that sender replica `sender` (of its stage's replicas) sends to receiver replica
// `receiver` of the next stage: the global rows [begin, begin + count) that both hold (data::rows_for splits).
struct RelaySlice {
  int sender = 0;
  int receiver = 0;
  int64_t begin = 0;
  int64_t count = 0;
};
// Every non-empty overlap, ordered by receiver, then by row (so a receiver assembles its rows in order).
std::vector<RelaySlice> relay_slices(int senders, int receivers, int64_t rows);

// What the runner needs beyond parallel::Instr.
struct InstrInfo {
  int64_t rows = 0;        // rows of this worker's batch share in the instruction's step
  int factor = 1;          // the replication factor g whose per-worker batch B/g `rows` is (cost lookups)
  int64_t offset = 0;      // Send/Recv: first row of the slice within the local batch share
  int64_t count = 0;       // Send/Recv: rows of the slice
  int group = -1;          // AllReduce, Update: the stage whose replicas reduce (-1: every worker)
  bool epoch_end = false;  // Update: the step ends an epoch (replicas then sum their shares of the loss)
};

struct DistillSchedule {
  Layout layout;
  int64_t batch = 0;  // global batch B
  int64_t steps = 0;  // optimizer steps of each block in the whole run
  int64_t steps_per_epoch = 0;
  std::vector<int64_t> start;  // per block: the first step this run executes (after a resume)
  std::vector<int64_t> end;    // per block: one past the last step this run executes
  Schedule schedule;
  std::vector<InstrInfo> info;  // per instruction id
};

// The run of `layout` over `steps` steps per block (epochs x steps_per_epoch), each block starting at
// start[b] (empty: 0) and running at most `max_steps` steps in this run (0: to the end). row_bytes[j] is the size of
// one row of the activation entering block j (row_bytes[blocks]: the last block's output); it sizes loads and relays.
// Pipelines need every block to start at the same step (ValueError otherwise). Per strategy:
//   DP   per block b, per step, on every worker: load its shard (B/W rows), teacher blocks 0..b, student b,
//        all-reduce of b's gradients over all workers, update.
//   LS   per worker, per block of its bin, per step: load the full batch, teacher 0..b, student b, update.
//   TR   per step, on each stage: load (stage 0) or receive, teacher blocks of the stage, send the last
//        activation (comm lane), one student forward/backward per block, a barrier over all workers, update.
//   DPU  TR without the barrier; a producer starts step s only after its consumers received step s - 1, so
//        it runs at most one step ahead (two relays in flight: double buffering).
//   AHD  DPU on any plan: replicas of a stage split each batch by rows (data::rows_for), relays carry the
//        relay_slices between replicas, and replicated stages all-reduce each block's gradients in-group.
DistillSchedule build_schedule(const Layout& layout, int64_t batch, int64_t steps, int64_t steps_per_epoch,
                               const std::vector<int64_t>& row_bytes, const std::vector<int64_t>& start = {},
                               int64_t max_steps = 0);

// Sets every instruction's cost_s from `profile`: teacher and student times at the instruction's per-worker
// batch, all-reduce at its group size, relays as the full-batch relay time times the slice's share, loads
// from load_s (when profiled). The profile must cover the layout's blocks and replication factors.
void apply_costs(DistillSchedule& s, const BlockProfile& profile);

// The host time of every teacher and student instruction's launches (the profile's teacher_host_s and
// student_host_s; 0 when not modelled), summed over all workers: workers that are threads of one process
// launch through its one launch path, so a run takes at least this long (communication calls, a few a step
// against hundreds of kernels, are left out).
double host_work_s(const DistillSchedule& s, const BlockProfile& profile);

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
