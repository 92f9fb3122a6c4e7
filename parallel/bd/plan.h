// Pipe-BD distribution plans: contiguous stages of blocks, each replicated over some workers; the AHD
// planner that finds the plan minimizing the bottleneck stage, and LS's bin packing of whole blocks.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/formats/json.h"

namespace tandem {
namespace parallel {
namespace bd {

// Profiled costs for K blocks at global batch B, for replication factors g = 1..G (per-worker batch B/g).
struct BlockProfile {
  int blocks() const { return static_cast<int>(relay_s.size()); }
  int max_replicas() const { return static_cast<int>(teacher_s.size()); }
  std::vector<std::vector<double>> teacher_s;    // [g-1][b]: teacher forward of block b at batch B/g
  std::vector<std::vector<double>> student_s;    // [g-1][b]: student forward + backward + step at B/g
  std::vector<std::vector<double>> allreduce_s;  // [g-1][b]: gradient all-reduce of student b over g workers
  std::vector<std::vector<int64_t>> memory;      // [g-1][b]: peak bytes to run block b alone at B/g
  std::vector<double> relay_s;                   // [b]: sending block b's teacher output at full batch B
  std::vector<double> load_s;                    // [g-1]: loading one batch of B/g rows (empty: not profiled)
  int64_t batch = 0;                             // B (0: not recorded)
  // [g-1][b]: the host's time to launch block b's teacher forward and student step at B/g (empty: not modelled;
  // tools/costmodel models it). Workers that are threads of one process share its launch path: their host
  // times add up (host_work_s in bd_schedule.h).
  std::vector<std::vector<double>> teacher_host_s, student_host_s;
  Json to_json() const;
  static BlockProfile from_json(const Json& j);  // throws ValueError on inconsistent sizes
};

struct Stage {
  int first = 0;     // first block (inclusive)
  int last = 0;      // last block (inclusive)
  int replicas = 1;  // workers running this stage, each on B / replicas rows
  int blocks() const { return last - first + 1; }
};

struct Plan {
  std::vector<Stage> stages;
  double bottleneck_s = 0;  // the slowest stage's modelled step time
  int64_t peak_memory = 0;  // the largest per-worker memory estimate
  int workers() const;
  // Worker ranks of each stage: stage i gets the next `replicas` ranks in order.
  std::vector<std::vector<int>> stage_ranks() const;
  std::string describe() const;  // "[0-0]x2 [1-2]x1 [3-5]x1  bottleneck 12.3 ms  peak 1.2 GiB"
  Json to_json() const;
  // Reads a plan given by hand or saved earlier; checks it covers blocks 0..blocks-1 contiguously and
  // uses exactly `workers` workers (ValueError otherwise).
  static Plan from_json(const Json& j, int blocks, int workers);
};

// How the AHD planner models a stage's step time. Both charge per block the teacher forward, the student
// forward + backward + step and the gradient all-reduce at the per-worker batch B/g, and take a plan's step
// time as its slowest stage's; they differ in the relay into a stage and in ties and memory:
//   Tandem  the relay is split over the receiving stage's g replicas (each receives B/g rows); honours a
//           memory limit; among plans of equal cost, any.
//   PipeBD  the paper code's schedule(): the full-batch relay is charged to the receiving stage whatever its
//           replication, no memory limit, and ties go to the first plan of its search order (pure pipelines
//           first, then by stage count, group sizes in descending lexicographic order, cut points ascending;
//           for 4 workers this is the code's order exactly).
enum class PlanModel { Tandem, PipeBD };
// The model the tools plan with unless told otherwise (the one that predicted measured step times better;
// see the README).
constexpr PlanModel kDefaultPlanModel = PlanModel::Tandem;
const char* plan_model_name(PlanModel m);  // "tandem", "pipe-bd"
// "tandem" or "pipe-bd"; ValueError otherwise.
PlanModel parse_plan_model(const std::string& name);

// Modelled time of one step of a stage under `model` (see PlanModel): per block teacher + student +
// all-reduce at B/g, plus receiving its input (the previous block's relay, charged to the receiver).
double stage_time(const BlockProfile& p, const Stage& s, PlanModel model);
// A plan's modelled step time under `model`: its slowest stage's.
double plan_time(const BlockProfile& p, const Plan& plan, PlanModel model);
// Memory estimate of one worker of a stage: the sum of its blocks' profiled peaks at B/g (an upper bound).
int64_t stage_memory(const BlockProfile& p, const Stage& s);

// The plan over exactly `workers` workers minimizing the bottleneck stage time under `model`, among all
// contiguous partitions of the blocks into stages and replication factors (any counts). Tandem: with every
// worker under `memory_limit` bytes (0: no limit). PipeBD takes no memory limit (ValueError if one is given).
// Throws ValueError when no plan fits.
Plan plan_hybrid(const BlockProfile& p, int workers, int64_t memory_limit = 0, PlanModel model = kDefaultPlanModel);
// The pure pipeline plan (one worker per stage, stages = workers) with the smallest bottleneck (TR, DPU);
// under PipeBD, the first such plan in its search order.
Plan plan_pipeline(const BlockProfile& p, int workers, int64_t memory_limit = 0, PlanModel model = kDefaultPlanModel);

// LS: whole blocks per worker, balancing the summed block costs (teacher prefix + student, full batch)
// by longest-processing-time-first bin packing. Returns the blocks of each worker (in block order).
std::vector<std::vector<int>> pack_blocks(const std::vector<double>& block_cost, int workers);

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
