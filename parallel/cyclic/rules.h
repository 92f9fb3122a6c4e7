// Cyclic DP's update rules (DP, CDP-v1, CDP-v2) and execution modes, and which parameter version each
// (round, micro-batch, stage) computes with.
#pragma once

#include <cstdint>
#include <string>

namespace tandem {
namespace parallel {
namespace cyclic {

// The update rules of the official code (Fournier & Oyallon 2024), with t the round (training iteration):
//   Dp:    theta^{t+1} = opt(theta^t, g^t): micro-batches of a round start together.
//   CdpV1: theta^{t+1} = opt(theta^t, g^{t-1}), the update of round 0 skipped: every gradient is one update
//          late, micro-batches start one after another with a uniform delay.
//   CdpV2: stage l of micro-batch i (0-based) computes with the previous version iff i + l < S - 1; the
//          others with the current one; each stage is updated as soon as its gradient is complete.
enum class Rule : uint8_t { Dp, CdpV1, CdpV2 };

// Where the micro-batches run:
//   DpWorkers:     N data-parallel workers, worker r computes micro-batch r through every stage;
//                  stage gradients are all-reduced on the comm lane as soon as each is ready.
//   ModelParallel: S workers, worker l holds stage l and serves all N micro-batches; activations and
//                  gradients are relayed point to point.
//   Zero:          N data-parallel workers, parameters, gradients and optimizer state sharded by stage;
//                  stage parameters are relayed along the workers just in time and gradients summed
//                  along the chain, the stage's owner updating (see trainer.h for the protocol).
enum class Mode : uint8_t { DpWorkers, ModelParallel, Zero };

// How dp-workers averages a stage's gradient over the workers:
//   AllReduce: one collective per stage and round, issued by each worker as soon as its backward of the stage
//              is done (it completes when the last worker joins).
//   Chain:     point to point along the cycle: worker r adds its gradient to the partial sum from r - 1 and
//              passes it on as soon as its backward of the stage is done; the last worker scales by 1/N and
//              relays the mean to the others in the order in which they apply it (0 -> 1 -> ... -> N - 2 under
//              CDP-v1), in time for each worker's update. Under the cyclic rules the messages then fall at
//              every worker's own time, spread over the round. Same arithmetic as the all-reduce (rank-order
//              f32 sum, then the 1/N scale).
enum class GradSync : uint8_t { AllReduce, Chain };

const char* rule_name(Rule r);      // "dp", "cdp-v1", "cdp-v2"
const char* mode_name(Mode m);      // "dp-workers", "mp", "zero"
const char* sync_name(GradSync g);  // "all-reduce", "chain"
// Parse the names above; ValueError listing the choices otherwise.
Rule parse_rule(const std::string& s);
Mode parse_mode(const std::string& s);
GradSync parse_sync(const std::string& s);
// The default: the chain for the cyclic rules (their point: communication spread over the round), the
// all-reduce for DP (its usual collective).
inline GradSync default_sync(Rule r) { return r == Rule::Dp ? GradSync::AllReduce : GradSync::Chain; }

inline bool is_cyclic(Rule r) { return r != Rule::Dp; }

// CDP-v2's mask: stage `stage` of micro-batch `micro` is stale iff micro + stage < stages - 1.
inline bool v2_stale(int micro, int stage, int stages) { return micro + stage < stages - 1; }
// Whether (micro, stage) computes with a gradient one update old under `rule` (v1: always; v2: its mask).
bool delayed(Rule rule, int micro, int stage, int stages);

// Workers each mode runs on: N (dp-workers, zero) or S (mp).
int workers_needed(Mode mode, int micro_batches, int stages);

// Checks N and S (1..kMaxMicroBatches, 1..kMaxStages); ValueError naming the bad value.
constexpr int kMaxMicroBatches = 64;
constexpr int kMaxStages = 64;
void check_config(int micro_batches, int stages);

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
