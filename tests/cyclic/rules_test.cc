// The update rules against an independent, sequential reference of the formulas: DP, CDP-v1 and CDP-v2
// parameter trajectories of the trainer (dp-workers on N CPU workers, mp on S workers, zero on N workers) equal
// the reference bitwise; DP equals large-batch SGD up to f32 summation order.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "models/losses.h"
#include "parallel/cyclic/partition.h"
#include "parallel/cyclic/trainer.h"
#include "runtime/autograd.h"
#include "runtime/error.h"
#include "runtime/lr_schedule.h"
#include "runtime/ops.h"
#include "tests/cyclic/cyclic_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace cyclic {
namespace {

using testing::make_trainer;
using testing::pair_by_name;
using Vec = std::vector<float>;
using Params = std::map<std::string, Vec>;

// The official code's algorithm, written out: a sequential loop over the micro-batches of each round, one
// parameter copy per rank (micro-batch), the gradient mean summed in rank order in f32 and scaled by 1/N
// (Communicator::all_reduce's arithmetic), and PyTorch's momentum SGD per element.
class Reference {
 public:
  Reference(const ModelFactory& factory, const Shape& micro_input, const TrainerOptions& o,
            const std::vector<size_t>& starts)
      : o_(o), model_(factory()) {
    Shape sample = micro_input;
    sample[0] = 1;
    auto stages = make_stages(model_units(*model_, sample), starts);
    for (size_t l = 0; l < stages.size(); ++l)
      for (auto& np : stages[l]->named_parameters()) stage_of_[np.first] = static_cast<int>(l);
    Params init;
    for (auto& np : model_->named_parameters()) init[np.first] = np.second.to_vector<float>();
    theta_.assign(o.micro_batches, init);
    momentum_.assign(o.micro_batches, Params());
    started_.assign(o.micro_batches, std::vector<bool>(o.stages, false));
  }

  void round(int64_t t, const MicroBatchFn& batches) {
    const int N = o_.micro_batches;
    std::vector<Params> grads(N);
    for (int i = 0; i < N; ++i) grads[i] = gradient(theta_[i], batches(t * N + i));
    Params mean;
    for (auto& kv : grads[0]) {
      Vec acc = kv.second;
      for (int i = 1; i < N; ++i)
        for (size_t e = 0; e < acc.size(); ++e) acc[e] += grads[i][kv.first][e];
      for (float& a : acc) a = static_cast<float>(static_cast<double>(a) * (1.0 / N));
      mean[kv.first] = acc;
    }
    const double lr = o_.lr * (o_.lr_schedule ? o_.lr_schedule->factor(t) : 1.0);
    for (int i = 0; i < N; ++i)
      for (int l = 0; l < o_.stages; ++l) {
        const bool stale = o_.rule == Rule::CdpV1 || (o_.rule == Rule::CdpV2 && i + l < o_.stages - 1);
        if (stale && t == 0) continue;  // the first delayed update is skipped
        const Params& g = stale ? previous_ : mean;
        for (auto& kv : theta_[i])
          if (stage_of_.at(kv.first) == l) sgd(kv.second, momentum_[i][kv.first], g.at(kv.first), lr, !started_[i][l]);
        started_[i][l] = true;
      }
    previous_ = mean;
  }

  // Rank i's parameters as tensors of the model's shapes.
  NamedTensors rank(int i) const {
    NamedTensors out;
    for (auto& np : model_->named_parameters()) out.push_back({np.first, from_vector<float>(theta_[i].at(np.first), np.second.shape())});
    return out;
  }

 private:
  Params gradient(const Params& theta, const MicroBatch& b) {
    {
      autograd::NoGradGuard no_grad;
      for (auto& np : model_->named_parameters()) {
        const Vec& v = theta.at(np.first);
        Tensor(np.second).copy_(from_vector<float>(v, np.second.shape()));
      }
    }
    model_->zero_grad();
    Tensor loss = models::cross_entropy(model_->forward(b.images), b.labels);
    loss.backward();
    Params g;
    for (auto& np : model_->named_parameters()) g[np.first] = np.second.grad().to_vector<float>();
    model_->zero_grad();
    return g;
  }

  // PyTorch SGD: d = g + wd p; buf = first ? d : m buf + d; p -= lr buf (in f32, as the fused kernel).
  void sgd(Vec& p, Vec& buf, const Vec& g, double lr, bool first) const {
    const float flr = static_cast<float>(lr), wd = static_cast<float>(o_.weight_decay),
                mom = static_cast<float>(o_.momentum);
    if (buf.empty()) buf.assign(p.size(), 0.0f);
    for (size_t e = 0; e < p.size(); ++e) {
      float d = g[e] + wd * p[e];
      float b = first ? d : mom * buf[e] + 1.0f * d;
      buf[e] = b;
      p[e] -= flr * b;
    }
  }

  TrainerOptions o_;
  std::shared_ptr<models::Sequential> model_;
  std::map<std::string, int> stage_of_;
  std::vector<Params> theta_, momentum_;
  std::vector<std::vector<bool>> started_;
  Params previous_;
};

struct Case {
  Rule rule;
  Mode mode;
  bool lr_steps;  // a step schedule that changes the rate during the run
};

class RulesTest : public ::testing::TestWithParam<Case> {};

TEST_P(RulesTest, TrajectoryEqualsTheSequentialReferenceBitwise) {
  const Case c = GetParam();
  const uint64_t seed = tandem::testing::fresh_seed();
  const Shape input{4, 3, 8, 8};
  ModelFactory factory = testing::tiny_resnet(4, 3, seed);
  MicroBatchFn batches = testing::seeded_batches(input, seed + 1);
  TrainerOptions o;
  o.rule = c.rule;
  o.mode = c.mode;
  o.micro_batches = 3;
  o.stages = 3;
  o.stage_starts = {0, 5, 9};  // conv1 .. layer1.1 | layer2.0 .. layer3.0 | layer3.1 .. fc
  o.lr = 0.05;
  o.momentum = 0.9;
  o.weight_decay = 1e-2;
  if (c.lr_steps) o.lr_schedule = optim::step_lr(2, 0.5);
  // local-ordered pairs messages in issue order and holds each send until received, as NCCL does.
  for (const char* backend : {"local", "local-ordered"}) {
    o.comm_backend = backend;
    CyclicTrainer trainer = make_trainer(factory, input, o);
    Reference ref(factory, input, o, o.stage_starts);
    // Two timelines of 2 rounds: state (delayed gradients, versions, momentum) crosses the boundary.
    for (int chunk = 0; chunk < 2; ++chunk) {
      auto stats = trainer.train(2, batches);
      ASSERT_EQ(stats.size(), 2u);
      for (int64_t t = chunk * 2; t < chunk * 2 + 2; ++t) ref.round(t, batches);
    }
    // Every micro-batch's view for the next round (zero: micro-batch 0's, whose versions its owners hold).
    const int views = c.mode == Mode::Zero ? 1 : 3;
    for (int i = 0; i < views; ++i)
      for (auto& p : pair_by_name(ref.rank(i), trainer.view_parameters(i)))
        tandem::testing::expect_bitwise_equal(p.second, p.first,
                                              std::string(rule_name(c.rule)) + " " + mode_name(c.mode) + " " +
                                                  backend + " rank " + std::to_string(i));
  }
}

INSTANTIATE_TEST_SUITE_P(
    Cyclic, RulesTest,
    ::testing::Values(Case{Rule::Dp, Mode::DpWorkers, true}, Case{Rule::CdpV1, Mode::DpWorkers, true},
                      Case{Rule::CdpV2, Mode::DpWorkers, true}, Case{Rule::Dp, Mode::ModelParallel, true},
                      Case{Rule::CdpV1, Mode::ModelParallel, true}, Case{Rule::CdpV2, Mode::ModelParallel, false},
                      Case{Rule::Dp, Mode::Zero, true}, Case{Rule::CdpV1, Mode::Zero, true},
                      Case{Rule::CdpV2, Mode::Zero, false}),
    [](const ::testing::TestParamInfo<Case>& info) {
      std::string s = std::string(rule_name(info.param.rule)) + "_" + mode_name(info.param.mode);
      for (char& ch : s)
        if (ch == '-') ch = '_';
      return s;
    });

TEST(Rules, AllReduceAndChainGiveTheSameTrajectory) {
  const uint64_t seed = tandem::testing::fresh_seed();
  const Shape input{4, 3, 8, 8};
  ModelFactory factory = testing::tiny_resnet(4, 3, seed);
  MicroBatchFn batches = testing::seeded_batches(input, seed + 1);
  TrainerOptions o;
  o.rule = Rule::CdpV2;
  o.micro_batches = 3;
  o.stages = 3;
  o.sync = GradSync::AllReduce;
  CyclicTrainer a = make_trainer(factory, input, o);
  o.sync = GradSync::Chain;
  CyclicTrainer b = make_trainer(factory, input, o);
  a.train(3, batches);
  b.train(3, batches);
  for (int i = 0; i < 3; ++i)
    for (auto& p : pair_by_name(a.view_parameters(i), b.view_parameters(i)))
      tandem::testing::expect_bitwise_equal(p.second, p.first, "rank " + std::to_string(i));
}

TEST(Rules, CdpV2InModelParallelDiffersFromPerRankCopiesOnlyThroughALearningRateChange) {
  // The per-rank stale copy applies an update with the following round's rate; mp's versions are the true
  // iterates. With the rate halved at round 2, they agree bitwise until then; the stale stages of rank 0 then
  // differ (by the rate difference times a momentum buffer) while rank 2, never stale, still agrees.
  const uint64_t seed = tandem::testing::fresh_seed();
  const Shape input{4, 3, 8, 8};
  ModelFactory factory = testing::tiny_resnet(4, 3, seed);
  MicroBatchFn batches = testing::seeded_batches(input, seed + 1);
  TrainerOptions o;
  o.rule = Rule::CdpV2;
  o.micro_batches = 3;
  o.stages = 3;
  o.stage_starts = {0, 5, 9};
  o.lr_schedule = optim::step_lr(2, 0.5);
  CyclicTrainer copies = make_trainer(factory, input, o);
  o.mode = Mode::ModelParallel;
  CyclicTrainer versions = make_trainer(factory, input, o);
  copies.train(2, batches);
  versions.train(2, batches);
  for (int i = 0; i < 3; ++i)
    for (auto& p : pair_by_name(copies.view_parameters(i), versions.view_parameters(i)))
      tandem::testing::expect_bitwise_equal(p.first, p.second, "before the rate change, rank " + std::to_string(i));
  copies.train(1, batches);
  versions.train(1, batches);
  double stale_diff = 0;
  for (auto& p : pair_by_name(copies.view_parameters(0), versions.view_parameters(0)))
    stale_diff = std::max(stale_diff, tandem::testing::max_rel_error(p.first, p.second));
  EXPECT_GT(stale_diff, 0.0);
  for (auto& p : pair_by_name(copies.view_parameters(2), versions.view_parameters(2)))
    tandem::testing::expect_bitwise_equal(p.first, p.second, "rank 2 (never stale)");
}

TEST(Rules, DpEqualsLargeBatchSgdUpToSummationOrder) {
  // Without batch norm the mean over N micro-batches of their mean-loss gradients is the gradient of the mean
  // loss over the N·B samples: DP's trajectory is large-batch SGD's. They differ only in f32 rounding (the
  // per-micro-batch means and sums are grouped differently), a relative 1e-5 over a few steps.
  const uint64_t seed = tandem::testing::fresh_seed();
  const Shape input{4, 2, 8, 8};
  ModelFactory factory = testing::plain_convnet(2, seed);
  MicroBatchFn batches = testing::seeded_batches(input, seed + 1);
  TrainerOptions o;
  o.rule = Rule::Dp;
  o.micro_batches = 3;
  o.stages = 2;
  CyclicTrainer trainer = make_trainer(factory, input, o);
  trainer.train(4, batches);

  auto model = factory();
  std::map<std::string, Tensor> buf;
  for (int64_t t = 0; t < 4; ++t) {
    std::vector<Tensor> images, labels;
    for (int i = 0; i < 3; ++i) {
      MicroBatch b = batches(t * 3 + i);
      images.push_back(b.images);
      labels.push_back(b.labels);
    }
    model->zero_grad();
    models::cross_entropy(model->forward(concat(images, 0)), concat(labels, 0)).backward();
    autograd::NoGradGuard no_grad;
    for (auto& np : model->named_parameters()) {
      Tensor p = np.second, g = np.second.grad();
      Tensor d = g + p * o.weight_decay;
      Tensor& b = buf[np.first];
      b = b.defined() ? b * o.momentum + d : d;
      p.copy_(p - b * o.lr);
    }
  }
  double worst = 0;
  for (auto& p : pair_by_name(model->named_parameters(), trainer.view_parameters(0)))
    worst = std::max(worst, tandem::testing::max_rel_error(p.second, p.first));
  EXPECT_LT(worst, 1e-5);
  EXPECT_GT(worst, 0.0);  // not the same computation: summation order differs
}

TEST(Rules, CheckpointResumesExactly) {
  const uint64_t seed = tandem::testing::fresh_seed();
  const Shape input{4, 3, 8, 8};
  ModelFactory factory = testing::tiny_resnet(4, 3, seed);
  MicroBatchFn batches = testing::seeded_batches(input, seed + 1);
  for (Mode mode : {Mode::DpWorkers, Mode::ModelParallel, Mode::Zero}) {
    TrainerOptions o;
    o.rule = Rule::CdpV2;
    o.mode = mode;
    o.micro_batches = 3;
    o.stages = 3;
    CyclicTrainer straight = make_trainer(factory, input, o);
    straight.train(2, batches);
    NamedTensors saved = straight.checkpoint_state();
    straight.train(2, batches);
    CyclicTrainer resumed = make_trainer(factory, input, o);
    resumed.load_checkpoint_state(saved);
    EXPECT_EQ(resumed.round(), 2);
    resumed.train(2, batches);
    for (auto& p : pair_by_name(straight.checkpoint_state(), resumed.checkpoint_state()))
      tandem::testing::expect_bitwise_equal(p.first, p.second, mode_name(mode));
    // A checkpoint of another configuration is refused.
    o.rule = Rule::Dp;
    CyclicTrainer other = make_trainer(factory, input, o);
    if (mode == Mode::ModelParallel) {
      EXPECT_THROW(other.load_checkpoint_state(saved), ValueError);
    }
  }
}

TEST(Rules, BadConfigurationsAreRefusedClearly) {
  const Shape input{4, 3, 8, 8};
  ModelFactory factory = testing::tiny_resnet(4, 3, 1);
  auto expect_error = [&](TrainerOptions o, int workers, const std::string& needle) {
    try {
      CyclicTrainer t(factory, input, o, make_workers("cpu:" + std::to_string(workers)));
      ADD_FAILURE() << "expected an error mentioning '" << needle << "'";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
    }
  };
  TrainerOptions o;
  o.micro_batches = 0;
  expect_error(o, 1, "micro-batches N");
  o.micro_batches = 2;
  o.stages = 14;  // ResNet-18 has 13 units
  expect_error(o, 2, "only 13 units");
  o.stages = 3;
  o.mode = Mode::ModelParallel;
  expect_error(o, 2, "needs 3 workers");
  o.mode = Mode::Zero;
  expect_error(o, 3, "needs 2 workers");
  o.mode = Mode::DpWorkers;
  o.stage_starts = {0, 4};
  expect_error(o, 2, "2 stages but S = 3");
  o.stage_starts = {0, 6, 4};
  expect_error(o, 2, "must increase");
}

}  // namespace
}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
