// The five strategies on 4 in-process CPU workers against the sequential reference of blockwise distillation
// (distill_testing.h), for both workloads: TR, TR+DPU, TR+DPU+AHD with unreplicated stages and LS bitwise; DP
// and replicated AHD stages within a tolerance (the reference averages the replicas' gradients its own way) and
// bitwise across message orders; teacher BN in train mode; the pipelines in bf16 against the reference in bf16,
// and the bytes they relay in f32 and bf16 against the workload's shapes.
#include <gtest/gtest.h>

#include "models/module.h"
#include "parallel/bd/strategy.h"
#include "runtime/tensor/precision.h"
#include "tests/bd/distill_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace bd {
namespace {

using testing::BlockWeights;

struct Case {
  const char* name;
  WorkloadSpec (*spec)(uint64_t);
  std::vector<Stage> pipeline;         // 4 stages, one worker each
  std::vector<std::vector<int>> bins;  // LS: blocks per worker
  std::vector<Stage> hybrid;           // replicated stages on 4 workers
};

const Case kCases[] = {
    {"nas",
     testing::nas_workload,
     {{0, 1, 1}, {2, 3, 1}, {4, 4, 1}, {5, 5, 1}},
     {{0, 3}, {1}, {2}, {4, 5}},
     {{0, 0, 1}, {1, 5, 3}}},
    {"compression",
     testing::compression_workload,
     {{0, 0, 1}, {1, 1, 1}, {2, 2, 1}, {3, 3, 1}},
     {{1}, {0, 2}, {}, {3}},
     {{0, 1, 3}, {2, 3, 1}}},
};

class Strategies : public ::testing::TestWithParam<int> {
 protected:
  const Case& c() const { return kCases[GetParam()]; }
};

// Bytes a pipeline of unreplicated stages relays over `steps` steps of `batch` rows, `element` bytes an element:
// the activation entering each stage after the first, from the workload's shapes.
int64_t relayed_bytes(const Workload& w, const std::vector<Stage>& stages, int64_t steps, int64_t batch,
                      int64_t element) {
  int64_t n = 0;
  for (size_t s = 1; s < stages.size(); ++s) n += shape_numel(w.activation_shape(stages[s].first, batch));
  return n * steps * element;
}

// 24 samples in batches of 8: 3 steps per epoch, 2 epochs (the cosine schedule spans both).
TEST_P(Strategies, PipelinesAndLsMatchTheSequentialReferenceBitwise) {
  const uint64_t seed = tandem::testing::fresh_seed();
  Workload w(c().spec(seed));
  RunContext ctx = testing::make_context(w, seed, 24, 8, 2);
  BlockWeights want = testing::reference_run(ctx);
  BlockWeights initial;
  std::vector<models::ModulePtr> fresh = w.make_students();
  for (int b = 0; b < w.blocks(); ++b) initial[b] = fresh[b]->state_dict();
  EXPECT_GT(testing::max_weight_error(initial, want), 1e-4) << "the reference did not train";
  const Plan plan = testing::make_plan(c().pipeline);
  for (Strategy s : {Strategy::TR, Strategy::DPU, Strategy::AHD}) {
    StrategyResult r;
    BlockWeights got = testing::run_in_process(ctx, pipeline_layout(s, plan, w.blocks(), 4), &r);
    testing::expect_same_weights(got, want, std::string(c().name) + " " + strategy_title(s));
    EXPECT_EQ(r.relay_bytes, relayed_bytes(w, c().pipeline, 6, 8, 4)) << strategy_title(s);
    EXPECT_EQ(r.all_reduce_bytes, 0) << strategy_title(s);
    EXPECT_EQ(r.epochs_run, 2);
    EXPECT_GT(r.wall_s, 0);
    for (const auto& per_block : r.loss)
      for (double l : per_block) EXPECT_GT(l, 0);
  }
  // Messages paired in issue order and one issuing thread per worker, as under NCCL: the same weights.
  for (Strategy s : {Strategy::TR, Strategy::DPU, Strategy::AHD})
    testing::expect_same_weights(
        testing::run_in_process(ctx, pipeline_layout(s, plan, w.blocks(), 4), nullptr, MessageMatching::InIssueOrder),
        want, std::string(c().name) + " " + strategy_title(s) + ", NCCL's message order");
  Layout ls = dp_layout(w.blocks(), 4);
  ls.strategy = Strategy::LS;
  ls.bins = c().bins;
  testing::expect_same_weights(testing::run_in_process(ctx, ls), want, std::string(c().name) + " LS");
}

// Replicated blocks take 2 steps, one per epoch (8 samples in a batch of 8): see testing::kReplicatedTolerance.
TEST_P(Strategies, DataParallelMatchesTheReferenceWithTheSameShards) {
  const uint64_t seed = tandem::testing::fresh_seed();
  Workload w(c().spec(seed));
  RunContext ctx = testing::make_context(w, seed, 8, 8, 2);
  const Layout dp = dp_layout(w.blocks(), 4);
  BlockWeights got = testing::run_in_process(ctx, dp);
  testing::expect_matches_reference(got, ctx, dp, std::string(c().name) + " DP");
  testing::expect_same_weights(testing::run_in_process(ctx, dp, nullptr, MessageMatching::InIssueOrder), got,
                               std::string(c().name) + " DP, NCCL's message order against the local order");
}

// Batch 8 over 3 replicas: 3, 3 and 2 rows, so the loss weighting of uneven shares is exercised too. The
// reference runs each copy's teacher chain on its rows from the input, while the strategy relays rows of
// activations computed on other row splits: equal because a teacher in eval mode treats rows independently
// and the CPU kernels are batch-invariant (on a GPU, cuDNN may pick other algorithms for other batch sizes:
// expect agreement to about 1e-5 there, not bits).
TEST_P(Strategies, ReplicatedAhdStagesMatchAReferenceWithTheSameRowSplits) {
  const uint64_t seed = tandem::testing::fresh_seed();
  Workload w(c().spec(seed));
  RunContext ctx = testing::make_context(w, seed, 8, 8, 2);
  const Layout ahd = pipeline_layout(Strategy::AHD, testing::make_plan(c().hybrid), w.blocks(), 4);
  BlockWeights got = testing::run_in_process(ctx, ahd);
  testing::expect_matches_reference(got, ctx, ahd, std::string(c().name) + " replicated TR+DPU+AHD");
  testing::expect_same_weights(
      testing::run_in_process(ctx, ahd, nullptr, MessageMatching::InIssueOrder), got,
      std::string(c().name) + " replicated TR+DPU+AHD, NCCL's message order against the local order");
}

TEST_P(Strategies, TeacherBatchNormInTrainModeKeepsTeacherRelayingExact) {
  const uint64_t seed = tandem::testing::fresh_seed();
  Workload w(c().spec(seed));
  RunContext ctx = testing::make_context(w, seed, 16, 8, 1);
  ctx.train.teacher_bn = TeacherBn::Train;
  BlockWeights want = testing::reference_run(ctx);
  testing::expect_same_weights(
      testing::run_in_process(ctx, pipeline_layout(Strategy::DPU, testing::make_plan(c().pipeline), w.blocks(), 4)),
      want, std::string(c().name) + " TR+DPU, teacher BN train");
  ctx.train.teacher_bn = TeacherBn::Eval;
  EXPECT_GT(testing::max_weight_error(testing::reference_run(ctx), want), 0) << "the teacher BN mode changed nothing";
}

INSTANTIATE_TEST_SUITE_P(Workloads, Strategies, ::testing::Values(0, 1),
                         [](const ::testing::TestParamInfo<int>& i) { return std::string(kCases[i.param].name); });

// Under bf16 the strategies and the reference compute the same bf16 arithmetic (relays carry the teacher's bf16
// outputs as they are): TR+DPU bitwise, relaying bf16, half the f32 bytes. CI time is short: one step of the
// compression workload (the NAS one's supernet warm-up costs ten times as much).
TEST(StrategiesBf16, PipelineMatchesTheBf16ReferenceBitwiseAndRelaysHalfTheBytes) {
  const Case& c = kCases[1];
  const uint64_t seed = tandem::testing::fresh_seed();
  Workload w(c.spec(seed));
  RunContext ctx = testing::make_context(w, seed, 8, 8, 1);
  PrecisionGuard policy(Precision::BF16);
  BlockWeights want = testing::reference_run(ctx);
  StrategyResult r;
  testing::expect_same_weights(
      testing::run_in_process(ctx, pipeline_layout(Strategy::DPU, testing::make_plan(c.pipeline), w.blocks(), 4), &r),
      want, std::string(c.name) + " TR+DPU in bf16");
  EXPECT_EQ(r.relay_bytes, relayed_bytes(w, c.pipeline, 1, 8, 2));
  PrecisionGuard f32(Precision::F32);
  EXPECT_GT(testing::max_weight_error(testing::reference_run(ctx), want), 0) << "bf16 computed as f32";
}

}  // namespace
}  // namespace bd
}  // namespace parallel
}  // namespace tandem
