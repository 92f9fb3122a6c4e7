// Measured activation memory: the peak total over workers of CDP is below DP's by the factor the unit-time
// model predicts from the model's own per-stage activation sizes (within 10%); transfers are recorded.
#include <gtest/gtest.h>

#include <iostream>

#include "parallel/cyclic/accounting.h"
#include "parallel/cyclic/profile.h"
#include "parallel/cyclic/trainer.h"
#include "parallel/simulator.h"
#include "tests/cyclic/cyclic_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace cyclic {
namespace {

struct Peaks {
  double measured = 0, predicted = 0;
  int64_t comm_bytes = 0;
};

struct Sizes {
  std::vector<double> stored;
  Transients transient;
};

Peaks run(Rule rule, const ModelFactory& factory, const Shape& input, const MicroBatchFn& batches, Sizes* sizes) {
  TrainerOptions o;
  o.rule = rule;
  o.micro_batches = 3;
  o.stages = 3;
  o.record_memory = true;
  o.record_comm = true;
  // conv1 .. layer1.0 | layer1.1 .. layer2.0 | layer2.1 .. fc: stages of similar activation sizes (a FLOP-balanced
  // split of a CIFAR ResNet puts most activations in its first stage, where CDP saves little).
  o.stage_starts = {0, 4, 6};
  CyclicTrainer trainer = testing::make_trainer(factory, input, o);
  // The figure's time steps (forward = backward = 1 per stage): stages of equal time, so that with stages of
  // equal size the prediction is 2S/(S+1). (Times dominated by one stage make every micro-batch hold nearly
  // everything for most of the round, and CDP then saves little: the prediction says so too.)
  trainer.set_costs(StageCosts::unit(3));
  if (sizes->stored.empty()) {
    // The model's own per-stage sizes: what each stage keeps from its forward to its backward.
    auto model = factory();
    Shape sample = input;
    sample[0] = 1;
    StageProfile p = profile_stages(make_stages(model_units(*model, sample), trainer.stage_starts()), input, 1);
    for (int64_t b : p.stored_bytes) sizes->stored.push_back(static_cast<double>(b));
    for (int64_t b : p.forward_extra_bytes) sizes->transient.forward_extra.push_back(static_cast<double>(b));
    for (int64_t b : p.backward_extra_bytes) sizes->transient.backward_extra.push_back(static_cast<double>(b));
  }
  trainer.train(5, batches);
  const RunRecord& run = trainer.last_run();
  SimResult sim = simulate(run.timeline.schedule);
  Peaks peaks;
  peaks.predicted = stored_activations(run.timeline, sim.times, sizes->stored, sizes->transient).total.peak();
  peaks.measured = aligned_activations(run.timeline, sim.times, run.times, run.memory, run.memory_base).total.peak();
  for (const auto& w : run.comm)
    for (const CommRecord& r : w) peaks.comm_bytes += r.bytes;
  return peaks;
}

TEST(Memory, CdpPeakActivationsAreBelowDpsByThePredictedFactor) {
  const uint64_t seed = tandem::testing::fresh_seed();
  const Shape input{8, 3, 16, 16};
  ModelFactory factory = testing::tiny_resnet(8, 3, seed);
  MicroBatchFn batches = testing::seeded_batches(input, seed + 1);
  Sizes sizes;
  Peaks dp = run(Rule::Dp, factory, input, batches, &sizes);
  Peaks cdp = run(Rule::CdpV1, factory, input, batches, &sizes);
  const double predicted = dp.predicted / cdp.predicted, measured = dp.measured / cdp.measured;
  // With equal stages the prediction would be 2S/(S+1) = 1.5; these are close but not equal.
  std::cout << "stage bytes " << sizes.stored[0] << " " << sizes.stored[1] << " " << sizes.stored[2] << "; DP/CDP peak "
            << "predicted " << predicted << ", measured " << measured << "\n";
  EXPECT_GT(predicted, 1.3);
  // The goal is 10%; with the stages' transients in the model the two agree much closer on the CPU.
  EXPECT_NEAR(measured / predicted, 1.0, 0.03) << "DP/CDP peak activations: measured " << measured
                                              << ", predicted " << predicted;
  // Both move the same gradient bytes (chain against all-reduce).
  EXPECT_GT(cdp.comm_bytes, 0);
  EXPECT_NEAR(static_cast<double>(cdp.comm_bytes) / static_cast<double>(dp.comm_bytes), 1.0, 0.35);
}

TEST(Memory, ModelParallelSharesWorkersAcrossMicroBatches) {
  // CDP + MP: N = S micro-batches on S workers; stage worker l holds the activations of the micro-batches
  // between their forward and backward of stage l (S - l of them at most in the unit-time model).
  const uint64_t seed = tandem::testing::fresh_seed();
  const Shape input{8, 3, 16, 16};
  ModelFactory factory = testing::tiny_resnet(8, 3, seed);
  TrainerOptions o;
  o.rule = Rule::CdpV1;
  o.mode = Mode::ModelParallel;
  o.micro_batches = 3;
  o.stages = 3;
  o.record_memory = true;
  o.record_comm = true;
  CyclicTrainer trainer = testing::make_trainer(factory, input, o);
  EXPECT_EQ(trainer.workers().size(), 3u);
  auto stats = trainer.train(4, testing::seeded_batches(input, seed + 1));
  ASSERT_EQ(stats.size(), 4u);
  for (const RoundStats& s : stats) EXPECT_EQ(s.samples, 3 * 8);
  const RunRecord& run = trainer.last_run();
  SimResult sim = simulate(run.timeline.schedule);
  ActivationProfile counts = stored_activations(run.timeline, sim.times, std::vector<double>(3, 1.0));
  for (int l = 0; l < 3; ++l) EXPECT_LE(counts.per_worker[l].peak(), 3 - l) << "stage " << l;
  // Activations and gradients went point to point between neighbouring stages.
  int64_t sends = 0;
  for (const auto& w : run.comm)
    for (const CommRecord& r : w) sends += r.op == "send";
  EXPECT_EQ(sends, 4 * 3 * 2 * 2);  // rounds x micro-batches x 2 boundaries x (activation + gradient)
}

TEST(Memory, ZeroShardsParametersAndOptimizerStateByStage) {
  // Between rounds a zero worker keeps only the stages it owns (plus every stage's batch-norm statistics, kept
  // per worker); a dp-workers worker keeps the whole model.
  const Shape input{4, 3, 8, 8};
  ModelFactory factory = testing::tiny_resnet(8, 3, tandem::testing::fresh_seed());
  auto model = factory();
  int64_t params = 0, buffers = 0;
  for (const Tensor& p : model->parameters()) params += static_cast<int64_t>(p.nbytes());
  for (auto& b : model->named_buffers()) buffers += static_cast<int64_t>(b.second.nbytes());
  TrainerOptions o;
  o.rule = Rule::CdpV2;
  o.micro_batches = 3;
  o.stages = 3;
  auto bytes = [](CyclicTrainer& t, MemoryCategory c) {
    std::vector<int64_t> out;
    for (const Worker& w : t.workers()) out.push_back(w.memory->counters().cur(c));
    return out;
  };
  CyclicTrainer dp = testing::make_trainer(factory, input, o);
  o.mode = Mode::Zero;
  CyclicTrainer zero = testing::make_trainer(factory, input, o);
  MicroBatchFn batches = testing::seeded_batches(input, 3);
  dp.train(2, batches);
  zero.train(2, batches);
  std::vector<int64_t> dp_params = bytes(dp, MemoryCategory::Parameters);
  std::vector<int64_t> zero_params = bytes(zero, MemoryCategory::Parameters);
  std::vector<int64_t> dp_state = bytes(dp, MemoryCategory::OptimizerState);
  std::vector<int64_t> zero_state = bytes(zero, MemoryCategory::OptimizerState);
  int64_t zero_total = 0, zero_state_total = 0;
  for (int w = 0; w < 3; ++w) {
    EXPECT_EQ(dp_params[w], params + buffers) << "worker " << w;
    EXPECT_EQ(dp_state[w], params) << "worker " << w;  // one momentum buffer per parameter
    EXPECT_LT(zero_params[w], dp_params[w]) << "worker " << w;
    zero_total += zero_params[w];
    zero_state_total += zero_state[w];
  }
  EXPECT_EQ(zero_total, params + 3 * buffers);  // one master per stage, statistics on every worker
  EXPECT_EQ(zero_state_total, params);          // momentum only at the owners
}

}  // namespace
}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
