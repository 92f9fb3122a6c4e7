// CyclicTrainer: trains a model cut into S stages with N micro-batches per round under the DP, CDP-v1 or
// CDP-v2 rule, in one of three modes, by running cyclic timelines (timeline.h) with parallel::Executor on the
// workers (CPU threads; on CUDA one compute and one comm stream per worker, events between them).
//
// Update rules (rules.h), SGD with momentum as PyTorch's (weight decay reads the parameters being updated; only
// the loss gradient is delayed; the fused sgd_step_ gets the delayed gradient and the current parameters). The
// learning rate of round t's update is lr * schedule(t). ḡ^t is the mean over micro-batches of their stage
// gradients, summed in micro-batch order in f32 and scaled by 1/N as Communicator::all_reduce does, in every
// mode (so every mode computes bitwise the same ḡ from the same per-micro-batch gradients).
//
// Modes and what their parameters equal:
//  dp-workers: worker r is micro-batch r and keeps its own copy of the model, exactly the official code's
//    per-rank copies: DP and CDP-v1 copies stay identical; under CDP-v2 a stale stage of worker r is updated
//    with ḡ^{t-1} (skipped at t = 0, with the lr of round t), the others with ḡ^t. Each stage's gradient goes
//    to the comm lane as soon as the worker's backward of that stage is done (an all-reduce, or the chain of
//    rules.h's GradSync); updates with ḡ^t run there after it, delayed updates on the compute lane after the
//    worker's own backward of the stage.
//  mp: worker l holds stage l and computes all N micro-batches; it sums their gradients itself (no all-reduce)
//    and keeps two parameter versions: θ^{t+1} = opt_t(θ^t, ḡ^{t-1}) (CDP-v1, θ^1 = θ^0) or
//    θ^{t+1} = opt_t(θ^t, ḡ^t) (DP, CDP-v2), micro-batch r of round t computing its forward and backward at
//    stage l with θ^t, or θ^{t-1} where CDP-v2 marks it stale. This is the sequence of true iterates that the
//    official code's per-rank copies emulate: its stale copy of a stage is the iterate one update old, except
//    that it applied that update with the learning rate of the following round (equal unless the schedule
//    changed the rate in between). So mp equals dp-workers bitwise for DP and CDP-v1 always, and for CDP-v2
//    while the learning rate is constant.
//  zero: N data-parallel workers; the owner of stage l (worker l mod N) alone keeps its master parameters,
//    momentum and mean gradient. Each round the owner keeps a copy of the version its own micro-batch needs
//    and sends one to the first worker (in rank order) of every run of workers that need the same version;
//    each worker relays it to the next of its run right away, keeps it from its forward to its backward of the
//    stage, then drops it (one relay per stage and round instead of a broadcast before the forward and another
//    before the backward). Stage gradients are summed along the workers in rank order (worker r adds its own
//    to the partial sum from r - 1 and passes it on), the last worker scales by 1/N and sends the mean to the
//    owner, who updates θ^v -> θ^{v+1} (the versions of mp) once its gradient is complete and every use of θ^v
//    has been sent. Equalities as for mp.
//
// Precision: the stages compute under the calling thread's policy when train() runs (runtime/tensor/precision.h,
// carried to the workers). mp's activations and input gradients travel in its activation dtype (bf16: half the
// bytes of f32). Weight gradients (f32 leaves under the policy), their sums and means, zero's parameter copies
// (the f32 masters) and momentum stay f32: summing gradients in bf16 would round every partial sum, an arithmetic
// that differs from mp's local f32 sum (the modes would no longer agree bitwise) and from the policy's f32 update.
//
// Batch norm: statistics of each micro-batch (no synchronization), running statistics per worker
// (dp-workers, zero: every worker's own for every stage; mp: the stage worker's, updated by all micro-batches).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/sequential.h"
#include "parallel/communicator.h"
#include "parallel/cyclic/partition.h"
#include "parallel/cyclic/timeline.h"
#include "parallel/executor.h"
#include "parallel/worker.h"
#include "runtime/base/non_copyable.h"
#include "runtime/formats/safetensors.h"
#include "runtime/memory/memory.h"
#include "runtime/optim/lr_schedule.h"

namespace tandem {
namespace parallel {
namespace cyclic {

struct MicroBatch {
  Tensor images;  // [B, C, H, W] f32
  Tensor labels;  // [B] i64
};
// Micro-batch `index` of the training stream (round t, micro-batch r is index t * N + r). Called on the thread
// that calls train(), with increasing indices.
using MicroBatchFn = std::function<MicroBatch(int64_t index)>;
using ModelFactory = std::function<std::shared_ptr<models::Sequential>()>;

struct TrainerOptions {
  Rule rule = Rule::CdpV1;
  Mode mode = Mode::DpWorkers;
  int micro_batches = 2;             // N
  int stages = 2;                    // S
  std::vector<size_t> stage_starts;  // unit indices (partition.h); empty: balanced by FLOPs
  std::optional<GradSync> sync;      // dp-workers' gradient averaging; unset: default_sync(rule)
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  bool nesterov = false;
  optim::LrSchedulePtr lr_schedule;  // factor of lr by round; null: constant
  bool record_memory = false;        // each worker's Activations samples during train()
  bool record_comm = false;          // each worker's transfers during train()
  // The data transfers: "local", "nccl" (GPU workers), or "local-ordered" (local, pairing messages in issue
  // order and holding each send until received, as NCCL does: checks on CPU workers that a timeline suits NCCL).
  std::string comm_backend = "local";
};

// What one train() call ran, for traces and accounting.
struct RunRecord {
  Timeline timeline;
  std::vector<std::vector<InstrTime>> times;      // executed, per worker
  std::vector<std::vector<MemorySample>> memory;  // per worker (record_memory)
  std::vector<int64_t> memory_base;               // per worker: Activations bytes when the run started
  std::vector<std::vector<CommRecord>> comm;      // per worker (record_comm)
  double start_s = 0, end_s = 0;                  // host_time_s()
};

struct RoundStats {
  int64_t round = 0;
  double loss = 0;      // mean over the round's micro-batches
  int64_t correct = 0;  // top-1 over the round's samples
  int64_t samples = 0;
};

class CyclicTrainer : NonCopyable {
 public:
  // Builds one model per worker that needs it (on the worker's thread, so its memory is charged to the
  // worker), cut into stages. `micro_input` is one micro-batch's input shape [B, C, H, W]. Every model the
  // factory returns must be identical (same seed). Throws ValueError for a bad configuration: N or S out of
  // range, S larger than the model's units, a split that does not match S, or workers that cannot host the
  // mode (their number must be N for dp-workers and zero, S for mp).
  CyclicTrainer(ModelFactory factory, const Shape& micro_input, TrainerOptions options, std::vector<Worker> workers);
  ~CyclicTrainer();

  // Runs rounds [round(), round() + rounds) as one timeline (with its fill and drain).
  std::vector<RoundStats> train(int64_t rounds, const MicroBatchFn& next);
  int64_t round() const;
  const RunRecord& last_run() const;

  // Turns the recording of memory samples and transfers for the next train() calls on or off.
  void set_recording(bool memory, bool comm);
  const TrainerOptions& options() const;
  const std::vector<Unit>& units() const;
  const std::vector<size_t>& stage_starts() const;
  // Costs the timelines are ordered (and simulated) by; default flop_costs().
  const StageCosts& costs() const;
  void set_costs(const StageCosts& costs);
  std::vector<Worker>& workers();

  // The parameters micro-batch `micro` will compute with in round round() (state_dict names, copies).
  NamedTensors view_parameters(int micro) const;
  // One state_dict of the whole model (torchvision names) for evaluation and export: dp-workers: worker 0's
  // parameters (the mean over workers under CDP-v2, as the official code does at the end) and the mean of the
  // running statistics; mp: the current version θ^{round()} and each stage worker's statistics; zero: the
  // owners' masters and the mean statistics.
  NamedTensors model_state() const;
  // Everything needed to continue exactly (every worker's parameters and versions, momentum, pending delayed
  // gradients, statistics, the round), under "cyclic." names; load into a trainer of the same configuration.
  NamedTensors checkpoint_state() const;
  void load_checkpoint_state(const NamedTensors& state);  // ValueError/ShapeError naming a missing or bad key

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// The steady-state length of a round in an executed run: the median interval between the starts of worker 0's
// consecutive rounds (its first forward of stage 0), leaving out the first and last interval; 0 with fewer than
// 4 rounds.
double steady_round_s(const RunRecord& run);

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
