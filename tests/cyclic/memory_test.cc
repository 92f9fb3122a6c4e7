// Activation memory against the paper's unit-time model (notes §2.2): in closed form, DP holds N*S stored stage
// activations at its peak and CDP a constant N(S+1)/2; with stage sizes s_l and N = S, DP peaks at N * sum(s_l) and
// CDP holds sum((S - l) s_l) (0-based l: S - l micro-batches are between their forward and backward of stage l at
// every time step). The timelines the trainer runs give these numbers, and the measured peak total over workers
// of CDP is below DP's by the factor they imply. Transfers are recorded and counted, in f32 and bf16.
#include <gtest/gtest.h>

#include <iostream>

#include "parallel/cyclic/accounting.h"
#include "parallel/cyclic/profile.h"
#include "parallel/cyclic/trainer.h"
#include "parallel/simulator.h"
#include "runtime/tensor/precision.h"
#include "tests/cyclic/cyclic_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace cyclic {
namespace {

TEST(Memory, UnitModelActivationsAreThePapersClosedForms) {
  // N dividing 2S: micro-batches start a whole number of time steps apart (d = 2S/N), as in the notes' cases.
  for (auto ns : {std::pair<int, int>{3, 3}, {4, 4}, {2, 4}, {8, 4}, {6, 3}}) {
    const int N = ns.first, S = ns.second;
    for (Rule rule : {Rule::Dp, Rule::CdpV1}) {
      TimelineSpec spec;
      spec.rule = rule;
      spec.micro_batches = N;
      spec.stages = S;
      spec.rounds = 6;
      Timeline tl = build_timeline(spec, StageCosts::unit(S));
      ASSERT_DOUBLE_EQ(tl.period_s, 2.0 * S);
      SimResult sim = simulate(tl.schedule);
      Curve total = stored_activations(tl, sim.times, std::vector<double>(S, 1.0)).total;
      const std::string what = std::string(rule_name(rule)) + " N=" + std::to_string(N) + " S=" + std::to_string(S);
      if (rule == Rule::Dp) {
        EXPECT_DOUBLE_EQ(total.peak(), N * S) << what;
      } else {
        // Constant in the steady state (round 3 runs with rounds 2 and 4 around it): the peak, and the mean of
        // a whole period at it.
        EXPECT_DOUBLE_EQ(total.peak(), N * (S + 1) / 2.0) << what;
        EXPECT_DOUBLE_EQ(total.mean(3 * tl.period_s, 4 * tl.period_s), N * (S + 1) / 2.0) << what;
      }
    }
  }
}

struct Peaks {
  double measured = 0, predicted = 0;
  double unit_stored = 0, sized_stored = 0;  // the run's timeline: stored stage counts, and stored bytes
  int64_t comm_bytes = 0;
};

struct Sizes {
  std::vector<double> stored;
  Transients transient;
};

constexpr int kN = 3, kS = 3, kRounds = 5;

Peaks run(Rule rule, const ModelFactory& factory, const Shape& input, const MicroBatchFn& batches, Sizes* sizes) {
  TrainerOptions o;
  o.rule = rule;
  o.micro_batches = kN;
  o.stages = kS;
  o.record_memory = true;
  o.record_comm = true;
  // conv1 .. layer1.0 | layer1.1 .. layer2.0 | layer2.1 .. fc: stages of similar activation sizes (a FLOP-balanced
  // split of a CIFAR ResNet puts most activations in its first stage, where CDP saves little).
  o.stage_starts = {0, 4, 6};
  CyclicTrainer trainer = testing::make_trainer(factory, input, o);
  // The figure's time steps (forward = backward = 1 per stage): stages of equal time, so that with stages of
  // equal size the prediction is 2S/(S+1). (Times dominated by one stage make every micro-batch hold nearly
  // everything for most of the round, and CDP then saves little: the prediction says so too.)
  trainer.set_costs(StageCosts::unit(kS));
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
  trainer.train(kRounds, batches);
  const RunRecord& run = trainer.last_run();
  SimResult sim = simulate(run.timeline.schedule);
  Peaks peaks;
  peaks.unit_stored = stored_activations(run.timeline, sim.times, std::vector<double>(kS, 1.0)).total.peak();
  peaks.sized_stored = stored_activations(run.timeline, sim.times, sizes->stored).total.peak();
  peaks.predicted = stored_activations(run.timeline, sim.times, sizes->stored, sizes->transient).total.peak();
  peaks.measured = aligned_activations(run.timeline, sim.times, run.times, run.memory, run.memory_base).total.peak();
  for (const auto& w : run.comm)
    for (const CommRecord& r : w) peaks.comm_bytes += r.bytes;
  return peaks;
}

TEST(Memory, CdpPeakActivationsAreBelowDpsByTheClosedFormFactor) {
  const testing::SeededResnet tiny({8, 3, 16, 16}, 8);
  Sizes sizes;
  Peaks dp = run(Rule::Dp, tiny.factory, tiny.input, tiny.batches, &sizes);
  Peaks cdp = run(Rule::CdpV1, tiny.factory, tiny.input, tiny.batches, &sizes);

  // The closed forms (N = S): the run's own timelines give exactly these.
  double all = 0, cdp_stored = 0, cdp_transients = 0, largest_transient = 0;
  for (int l = 0; l < kS; ++l) {
    const double t = std::max(sizes.transient.forward_extra[l], sizes.transient.backward_extra[l]);
    all += sizes.stored[l];
    cdp_stored += (kS - l) * sizes.stored[l];
    cdp_transients += t;  // at most one instruction per stage runs at a time
    largest_transient = std::max(largest_transient, t);
  }
  EXPECT_DOUBLE_EQ(dp.unit_stored, kN * kS);
  EXPECT_DOUBLE_EQ(cdp.unit_stored, kN * (kS + 1) / 2.0);
  EXPECT_DOUBLE_EQ(dp.sized_stored, kN * all);
  EXPECT_DOUBLE_EQ(cdp.sized_stored, cdp_stored);

  // Measured, each run holds its stored activations plus the temporaries of the instructions running: DP's N
  // workers at most one each, CDP's at most one per stage. So the measured DP/CDP ratio lies between
  // N*all / (cdp_stored + cdp_transients) and N*(all + largest_transient) / cdp_stored.
  const double measured = dp.measured / cdp.measured;
  const double low = kN * all / (cdp_stored + cdp_transients), high = kN * (all + largest_transient) / cdp_stored;
  std::cout << "stage bytes " << sizes.stored[0] << " " << sizes.stored[1] << " " << sizes.stored[2]
            << "; DP/CDP peak: closed form " << kN * all / cdp_stored << " (bounds " << low << " .. " << high
            << "), with transients simulated " << dp.predicted / cdp.predicted << ", measured " << measured << "\n";
  EXPECT_GT(kN * all / cdp_stored, 1.3);  // equal stages would give 2S/(S+1) = 1.5
  EXPECT_GE(measured, low);
  EXPECT_LE(measured, high);
  // The timeline with the stages' transients places each instruction's temporaries where it runs: on the CPU the
  // measured peaks agree with it within 3%.
  EXPECT_NEAR(measured / (dp.predicted / cdp.predicted), 1.0, 0.03);

  // Communication. An all-reduce of P bytes over N ranks (reduce-scatter then all-gather) has every byte of
  // each rank's chunk sent to and received by N - 1 peers: 4 (N - 1) P bytes counted over the ranks (sent +
  // received). The chain sends the partial sum N - 1 times and the mean N - 1 times, each counted by sender
  // and receiver: also 4 (N - 1) P. Both average every stage's gradients once per round.
  int64_t param_bytes = 0;
  for (const Tensor& p : tiny.factory()->parameters()) param_bytes += static_cast<int64_t>(p.nbytes());
  EXPECT_EQ(dp.comm_bytes, int64_t{kRounds} * 4 * (kN - 1) * param_bytes);
  EXPECT_EQ(cdp.comm_bytes, dp.comm_bytes);
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

// Under bf16, mp's activations and input gradients cross the boundary in bf16: the bytes sent (the communicator's
// records), the timeline's scheduled bytes and the profiled stage output are the boundary's elements (from the
// model's shapes) times 2, against 4 in f32; dp-workers' weight gradients stay f32 (all-reduced bytes unchanged).
TEST(Memory, Bf16HalvesTheActivationMessagesAndKeepsGradientsInF32) {
  const uint64_t seed = tandem::testing::fresh_seed();
  const Shape input{4, 3, 8, 8};
  const ModelFactory factory = testing::plain_convnet(3, seed);
  const std::vector<Unit> units = model_units(*factory(), {1, 3, 8, 8});
  const int64_t boundary = shape_numel(units[1].output) * input[0];  // relu1's output for one micro-batch
  struct Bytes {
    int64_t sent = 0, all_reduced = 0, profiled = 0;
    MessageBytes scheduled;
  };
  auto run = [&](Precision p, Mode mode) {
    PrecisionGuard policy(p);
    TrainerOptions o;
    o.rule = Rule::CdpV1;
    o.mode = mode;
    o.stage_starts = {0, 2};  // micro_batches = stages = 2
    o.record_comm = true;
    CyclicTrainer trainer = testing::make_trainer(factory, input, o);
    trainer.train(1, testing::seeded_batches(input, seed + 1));
    Bytes b;
    for (const auto& w : trainer.last_run().comm)
      for (const CommRecord& r : w) (r.op == "send" ? b.sent : b.all_reduced) += r.bytes;
    b.scheduled = message_bytes(trainer.last_run().timeline);
    b.profiled = profile_stages(make_stages(units, o.stage_starts), input, 1).output_bytes[0];
    return b;
  };
  for (Precision p : {Precision::F32, Precision::BF16}) {
    const int64_t element = p == Precision::BF16 ? 2 : 4;
    const Bytes b = run(p, Mode::ModelParallel);
    const std::string what = precision_name(p);
    EXPECT_EQ(b.sent, 2 * 2 * boundary * element) << what;  // 2 micro-batches x (activation + gradient)
    EXPECT_EQ(b.scheduled.activations, 2 * boundary * element) << what;
    EXPECT_EQ(b.scheduled.activation_gradients, 2 * boundary * element) << what;
    EXPECT_EQ(b.profiled, boundary * element) << what;
  }
  const Bytes f32 = run(Precision::F32, Mode::DpWorkers), bf16 = run(Precision::BF16, Mode::DpWorkers);
  EXPECT_GT(f32.scheduled.gradients, 0);
  EXPECT_EQ(bf16.all_reduced, f32.all_reduced);
  EXPECT_EQ(bf16.scheduled.gradients, f32.scheduled.gradients);
  EXPECT_EQ(bf16.scheduled.activations + f32.scheduled.activations, 0);
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
