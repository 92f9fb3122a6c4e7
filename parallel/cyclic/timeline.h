// Cyclic-DP timelines as parallel::Schedule data: the DP and cyclic orders of N micro-batches through S
// stages in the three modes, with what each instruction does (Action), for the executor, the simulator and
// traces.
//
// Ideal times (the figure's model, generalized): a round (one micro-batch through every stage, forward then
// backward) lasts P = sum over stages of forward + backward cost. Under DP every micro-batch of round k
// starts at k*P; under the cyclic rules micro-batch r starts at k*P + r*P/N. With unit costs and N = S the
// cyclic order puts exactly one operation per stage in every time step. The schedule orders every lane's
// instructions by these ideal times; dependencies (data, parameter versions, collectives, point-to-point
// messages, and a "start after your predecessor has done P/N of work" signal that keeps the offsets) make the
// executor and simulator respect them. (Offsets fall on operation boundaries: the one nearest to P/N; with N > 2S
// and equal stages that is one operation, and rounds stretch to N operations.) Messages that are ready early
// (dp-workers' mean gradients, zero's parameters) also wait for the sender's own progress to the receiver's
// need, so that they go just in time rather than all at once.
#pragma once

#include <cstdint>
#include <vector>

#include "parallel/cyclic/rules.h"
#include "parallel/schedule.h"

namespace tandem {
namespace parallel {
namespace cyclic {

// Per-stage costs for simulation (seconds, or time steps) and the sizes of what moves.
struct StageCosts {
  std::vector<double> forward_s, backward_s, update_s;  // one micro-batch through one stage; one optimizer step
  std::vector<int64_t> param_bytes;                     // parameters (= gradients) of each stage
  std::vector<int64_t> activation_bytes;                // output of each stage for one micro-batch (mp relays it)
  double link_bytes_per_s = 0;  // point-to-point and all-reduce bandwidth; 0: transfers are free
  double latency_s = 0;         // per message
  int stages() const { return static_cast<int>(forward_s.size()); }
  // Forward = backward = 1 time step, updates and transfers free: the paper figure's time steps.
  static StageCosts unit(int stages);
  void check(int stages) const;  // ValueError unless every vector has `stages` entries, costs >= 0
};

enum class ActionKind : uint8_t {
  Forward,    // stage forward of (round, micro) (the last stage adds the loss), keeping its graph
  Backward,   // stage backward of (round, micro); takes the stage's parameter gradients
  AllReduce,  // dp-workers: mean of the stage's gradients of `round` over the workers
  Update,     // optimizer step of `stage` (see the Update fields)
  SendAct,
  RecvAct,  // mp: stage output of (round, micro) from worker stage to stage + 1
  SendGrad,
  RecvGrad,     // mp: input gradient of (round, micro) from worker stage + 1 back to stage
  IssueParams,  // zero: the owner sends (peer >= 0) or keeps (peer < 0) a copy of its master, `version`
  RelayParams,  // zero: a worker passes the stage parameters it received on to `peer`
  RecvParams,   // zero: receives stage parameters of `round`
  ChainSend,    // zero, dp-workers' chain: adds its stage gradient to the received partial sum and
                //   sends it to `peer`; the last worker scales by 1/N (peer: zero's owner, or < 0:
                //   keeps the mean)
  ChainRecv,    // receives the partial sum from worker - 1 (or the complete mean, on zero's owner)
  MeanSend,     // dp-workers' chain: passes the mean gradient on to `peer`
  MeanRecv,     // dp-workers' chain: receives the mean gradient
};
const char* action_name(ActionKind k);

struct Action {
  ActionKind kind = ActionKind::Forward;
  int64_t round = -1;
  int micro = -1;
  int stage = -1;
  int peer = -1;
  int64_t version = -1;  // Forward (mp, zero: the parameter version it computes with), IssueParams/RecvParams
  // Update: θ^{dst} = opt_iteration(θ^{src}, ḡ^{grad_round}); grad_round < 0: θ^{dst} = θ^{src} (the
  // skipped first CDP-v1 update). dp-workers updates the worker's own copy in place (src = dst = -1).
  int64_t iteration = -1;
  int64_t grad_round = -1;
  int64_t src_version = -1;
  int64_t dst_version = -1;
  bool final_sum = false;  // ChainSend/ChainRecv: the message carries the complete mean
};

struct TimelineSpec {
  Rule rule = Rule::CdpV1;
  Mode mode = Mode::DpWorkers;
  int micro_batches = 1;                // N
  int stages = 1;                       // S
  GradSync sync = GradSync::AllReduce;  // dp-workers only
  int64_t first_round = 0;              // global index of the first round (staleness and skipped updates depend on it)
  int64_t rounds = 1;
};

struct Timeline {
  TimelineSpec spec;
  Schedule schedule;
  std::vector<Action> actions;  // by instruction id
  double period_s = 0;          // P: the ideal length of a round
  int workers() const { return schedule.workers(); }
};

// The schedule of rounds [first_round, first_round + rounds). Everything of those rounds is in it (the
// fill at the start and the drain at the end included), so consecutive timelines run one after another;
// state that crosses the boundary (a delayed gradient, a parameter version) is the trainer's.
// Throws ValueError for a bad spec or costs.
Timeline build_timeline(const TimelineSpec& spec, const StageCosts& costs);

// ZeRO: the worker that owns stage `stage` (its master parameters, optimizer state, and summed gradient).
inline int stage_owner(int stage, int workers) { return stage % workers; }

// The parameter version (mp and zero) that micro-batch `micro` computes with at `stage` in `round`:
// DP and CDP-v1: round (CDP-v1's θ^1 equals θ^0); CDP-v2: round - 1 where stale, round elsewhere (θ^{-1} is θ^0).
int64_t version_of(Rule rule, int64_t round, int micro, int stage, int stages);

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
