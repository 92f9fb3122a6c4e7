// The update rules against an independent, sequential reference of the formulas (CDP-v2's stale stages derived
// from the paper's timeline): DP, CDP-v1 and CDP-v2 parameter trajectories and batch-norm running statistics of
// the trainer (dp-workers on N CPU workers, mp on S workers, zero on N workers) equal the reference bitwise, for
// N = S and N != S, also under the bf16 policy (trainer and reference both in bf16); a bf16 run stays within a
// derived tolerance of the f32 reference; DP equals large-batch SGD up to f32 summation order.
#include <gtest/gtest.h>

#include <map>
#include <string>

#include "models/losses.h"
#include "parallel/cyclic/partition.h"
#include "parallel/cyclic/trainer.h"
#include "runtime/base/error.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/precision.h"
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

// CDP-v2 from the paper's timeline (the figure's unit-time model, notes §2.1-2.2 and §8.4): a round lasts 2S time
// steps (forward = backward = 1 per stage), micro-batch r starts r*d into it with d = 2S/N, runs its forward of
// stage l in slot r*d + l and its backward in slot r*d + 2S - 1 - l; stage l is updated as soon as the last
// micro-batch of the round has finished its backward of l, at the end of slot (N-1)*d + 2S - 1 - l. Micro-batch r
// of the next round computes stage l with the updated version iff its forward of l starts at or after that:
// 2S + r*d + l >= (N-1)*d + 2S - l, i.e. (times N) 2S*r + 2N*l >= 2S*(N-1). Otherwise it is one update stale.
bool stale_by_timeline(int r, int l, int N, int S) { return 2 * S * r + 2 * N * l < 2 * S * (N - 1); }

// The official code's CDP2 (notes §3.3): stage l of rank i is current iff l >= S - 1 - i. For N = S it is the
// timeline's mask (Rules.CdpV2MaskFromThePaperTimeline); for N != S the two differ, and Tandem follows the code.
bool stale_in_official_code(int i, int l, int S) { return l < S - 1 - i; }

// Whether micro-batch i computes stage l with a gradient one update late.
bool delayed_in_reference(Rule rule, int i, int l, int N, int S) {
  if (rule == Rule::CdpV1) return true;
  if (rule == Rule::Dp) return false;
  return N == S ? stale_by_timeline(i, l, N, S) : stale_in_official_code(i, l, S);
}

// The official code's algorithm, written out: a sequential loop over the micro-batches of each round, one
// parameter copy per rank (micro-batch), the gradient mean summed in rank order in f32 and scaled by 1/N
// (Communicator::all_reduce's arithmetic), and PyTorch's momentum SGD per element. Batch-norm running
// statistics: each rank's own (the official code's, and dp-workers' and zero's), or with `shared_stats` one set
// updated by every micro-batch in order (mp, whose stage worker runs all of them).
class Reference {
 public:
  Reference(const ModelFactory& factory, const Shape& micro_input, const TrainerOptions& o,
            const std::vector<size_t>& starts, bool shared_stats)
      : o_(o), model_(factory()) {
    Shape sample = micro_input;
    sample[0] = 1;
    auto stages = make_stages(model_units(*model_, sample), starts);
    for (size_t l = 0; l < stages.size(); ++l) {
      for (auto& np : stages[l]->named_parameters()) stage_of_[np.first] = static_cast<int>(l);
      for (auto& nb : stages[l]->named_buffers()) stage_of_[nb.first] = static_cast<int>(l);
    }
    Params init;
    for (auto& np : model_->named_parameters()) init[np.first] = np.second.to_vector<float>();
    theta_.assign(o.micro_batches, init);
    momentum_.assign(o.micro_batches, Params());
    started_.assign(o.micro_batches, std::vector<bool>(o.stages, false));
    stats_.assign(shared_stats ? 1 : o.micro_batches, copies(model_->named_buffers()));
  }

  void round(int64_t t, const MicroBatchFn& batches) {
    const int N = o_.micro_batches;
    std::vector<Params> grads(N);
    for (int i = 0; i < N; ++i) grads[i] = gradient(theta_[i], stats_[stats_.size() == 1 ? 0 : i], batches(t * N + i));
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
        const bool stale = delayed_in_reference(o_.rule, i, l, N, o_.stages);
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
    for (auto& np : model_->named_parameters())
      out.push_back({np.first, from_vector<float>(theta_[i].at(np.first), np.second.shape())});
    return out;
  }
  // The running statistics of rank i (or the shared set), and the stage each buffer belongs to.
  const NamedTensors& stats(int i) const { return stats_.at(stats_.size() == 1 ? 0 : i); }
  int stage_of(const std::string& name) const { return stage_of_.at(name); }

 private:
  static NamedTensors copies(const NamedTensors& ts) {
    NamedTensors out;
    for (auto& nt : ts) out.push_back({nt.first, nt.second.clone()});
    return out;
  }

  // The gradient of micro-batch b's loss at theta, the forward updating `stats` (batch-norm running statistics).
  Params gradient(const Params& theta, NamedTensors& stats, const MicroBatch& b) {
    {
      autograd::NoGradGuard no_grad;
      for (auto& np : model_->named_parameters()) {
        const Vec& v = theta.at(np.first);
        Tensor(np.second).copy_(from_vector<float>(v, np.second.shape()));
      }
    }
    model_->load_state_dict(stats, /*strict=*/false);  // the buffers only (and batch norm's count mirror)
    model_->zero_grad();
    Tensor loss = models::cross_entropy(model_->forward(b.images), b.labels);
    loss.backward();
    Params g;
    for (auto& np : model_->named_parameters()) g[np.first] = np.second.grad().to_vector<float>();
    model_->zero_grad();
    stats = copies(model_->named_buffers());
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
  std::vector<NamedTensors> stats_;
  Params previous_;
};

struct Case {
  Rule rule;
  Mode mode;
  bool lr_steps;  // a step schedule that changes the rate during the run
  int n = 3, s = 3;
  bool issue_order = true;  // also run on local-ordered (messages paired in issue order, as NCCL pairs them)
  // The policy of trainer and reference alike: under bf16 both compute the same bf16 arithmetic (the stage
  // boundaries cut no computation: mp relays the bf16 outputs and input gradients as they are), so bitwise still.
  Precision precision = Precision::F32;
};

class RulesTest : public ::testing::TestWithParam<Case> {};

// Parameters of every micro-batch's view and every worker's batch-norm running statistics, bitwise.
TEST_P(RulesTest, TrajectoryEqualsTheSequentialReferenceBitwise) {
  const Case c = GetParam();
  PrecisionGuard policy(c.precision);
  const testing::SeededResnet tiny({4, 3, 8, 8});
  TrainerOptions o;
  o.rule = c.rule;
  o.mode = c.mode;
  o.micro_batches = c.n;
  o.stages = c.s;
  if (c.s == 3) o.stage_starts = {0, 5, 9};  // conv1 .. layer1.1 | layer2.0 .. layer3.0 | layer3.1 .. fc
  o.lr = 0.05;
  o.momentum = 0.9;
  o.weight_decay = 1e-2;
  if (c.lr_steps) o.lr_schedule = optim::step_lr(2, 0.5);
  const bool mp = c.mode == Mode::ModelParallel;
  // local-ordered pairs messages in issue order and holds each send until received, as NCCL does.
  for (const char* backend : {"local", "local-ordered"}) {
    if (!c.issue_order && std::string(backend) == "local-ordered") continue;
    o.comm_backend = backend;
    CyclicTrainer trainer = tiny.trainer(o);
    Reference ref(tiny.factory, tiny.input, o, trainer.stage_starts(), mp);
    // Two timelines of 2 rounds: state (delayed gradients, versions, momentum) crosses the boundary.
    for (int chunk = 0; chunk < 2; ++chunk) {
      auto stats = trainer.train(2, tiny.batches);
      ASSERT_EQ(stats.size(), 2u);
      for (int64_t t = chunk * 2; t < chunk * 2 + 2; ++t) ref.round(t, tiny.batches);
    }
    const std::string what = std::string(rule_name(c.rule)) + " " + mode_name(c.mode) + " N=" + std::to_string(c.n) +
                             " S=" + std::to_string(c.s) + " " + backend;
    // Every micro-batch's view for the next round (zero: micro-batch 0's, whose versions its owners hold).
    const int views = c.mode == Mode::Zero ? 1 : c.n;
    for (int i = 0; i < views; ++i)
      for (auto& p : pair_by_name(ref.rank(i), trainer.view_parameters(i)))
        tandem::testing::expect_bitwise_equal(p.second, p.first, what + " rank " + std::to_string(i));
    // Running statistics: worker w's are micro-batch w's (dp-workers, zero); mp's worker l holds stage l's.
    NamedTensors state = trainer.checkpoint_state();
    std::map<std::string, Tensor> saved(state.begin(), state.end());
    int compared = 0;
    for (int i = 0; i < (mp ? 1 : c.n); ++i)
      for (auto& nb : ref.stats(i)) {
        const std::string key = "cyclic.w" + std::to_string(mp ? ref.stage_of(nb.first) : i) + "." + nb.first;
        auto it = saved.find(key);
        ASSERT_NE(it, saved.end()) << what << ": no " << key;
        tandem::testing::expect_bitwise_equal(it->second, nb.second, what + " " + key);
        ++compared;
      }
    EXPECT_GT(compared, 0) << what << ": the model has batch norm";
  }
}

// The bf16 trainer against the f32 reference, where the arithmetic differs: after 4 rounds (CDP-v1, mp, the
// boundary activation and its gradient sent in bf16), each parameter's displacement from θ^0 within
// kBf16Displacement of the reference's, relative to the largest displacement of the model. Why that size: bf16
// keeps 8 significant bits, a relative rounding of at most u = 2^-8 at each of the policy's points, and a gradient
// of this convnet (no batch norm) passes at most 17 of them on its way from the input to conv1's weight (operands,
// products and bias sums of 3 layers forward, the pooling, the logits' gradient, 3 products back), so it errs by
// at most about 17u of its scale, and the 4 updates' sum of such gradients by at most 17u of the displacement they
// make. Measured over 25 seeds on each CPU convolution path (f32 on widened copies,
// oneDNN's native bf16): at most 0.018 and 0.024. A dropped, doubled or misrouted update
// errs by 1 or more; an f32 run (the policy lost on the workers) by 0, which the last check refuses.
constexpr double kBf16Displacement = 17.0 / 256;

TEST(Rules, Bf16TrajectoryStaysNearTheF32Reference) {
  const uint64_t seed = tandem::testing::fresh_seed();
  const Shape input{4, 3, 8, 8};
  const ModelFactory factory = testing::plain_convnet(3, seed);
  const MicroBatchFn batches = testing::seeded_batches(input, seed + 1);
  TrainerOptions o;
  o.rule = Rule::CdpV1;
  o.mode = Mode::ModelParallel;
  o.micro_batches = 2;
  o.stages = 2;
  o.stage_starts = {0, 2};  // conv1, relu1 | conv2 .. fc: the ReLU's output crosses in bf16
  Reference f32(factory, input, o, o.stage_starts, true);
  for (int64_t t = 0; t < 4; ++t) f32.round(t, batches);
  PrecisionGuard policy(Precision::BF16);
  CyclicTrainer trainer = make_trainer(factory, input, o);
  trainer.train(4, batches);
  std::map<std::string, Tensor> start, got;
  for (auto& np : factory()->named_parameters()) start[np.first] = np.second;
  for (auto& np : trainer.view_parameters(0)) got[np.first] = np.second;
  std::vector<std::pair<std::string, Tensor>> moved;  // the f32 reference's displacements
  double largest = 0;
  for (auto& np : f32.rank(0)) {
    moved.push_back({np.first, sub(np.second, start.at(np.first))});
    largest = std::max(largest, tandem::testing::max_magnitude(moved.back().second));
  }
  double worst = 0;
  for (auto& m : moved) {
    const double e = tandem::testing::max_rel_error(sub(got.at(m.first), start.at(m.first)), m.second, largest);
    EXPECT_LE(e, kBf16Displacement) << m.first;
    worst = std::max(worst, e);
  }
  EXPECT_GT(worst, 0) << "the bf16 run computed the f32 trajectory: the policy did not reach the workers";
}

std::vector<Case> rule_cases() {
  std::vector<Case> cs = {{Rule::Dp, Mode::DpWorkers, true},
                          {Rule::CdpV1, Mode::DpWorkers, true},
                          {Rule::CdpV2, Mode::DpWorkers, true},
                          {Rule::Dp, Mode::ModelParallel, true},
                          {Rule::CdpV1, Mode::ModelParallel, true},
                          {Rule::CdpV2, Mode::ModelParallel, false},
                          {Rule::Dp, Mode::Zero, true},
                          {Rule::CdpV1, Mode::Zero, true},
                          {Rule::CdpV2, Mode::Zero, false}};
  // N != S, where CDP-v2 follows the official code's mask rather than the timeline's.
  for (auto ns : {std::pair<int, int>{2, 4}, {5, 3}})
    for (Mode m : {Mode::DpWorkers, Mode::ModelParallel, Mode::Zero})
      for (Rule r : {Rule::Dp, Rule::CdpV1, Rule::CdpV2})
        cs.push_back({r, m, r != Rule::CdpV2 || m == Mode::DpWorkers, ns.first, ns.second});
  // bf16 (CI time is short): mp, whose messages are bf16, local messages only (gpu_test runs them on NCCL).
  cs.push_back({Rule::CdpV1, Mode::ModelParallel, true, 3, 3, false, Precision::BF16});
  return cs;
}

INSTANTIATE_TEST_SUITE_P(Cyclic, RulesTest, ::testing::ValuesIn(rule_cases()),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string s = std::string(rule_name(info.param.rule)) + "_" + mode_name(info.param.mode);
                           if (info.param.n != 3 || info.param.s != 3)
                             s += "_n" + std::to_string(info.param.n) + "_s" + std::to_string(info.param.s);
                           if (info.param.precision != Precision::F32) s += "_bf16";
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

TEST(Rules, CdpV2MaskFromThePaperTimeline) {
  // For N = S the timeline's mask is the official code's (the notes' simulation found the same for 3, 4, 8).
  for (int s = 1; s <= 8; ++s)
    for (int r = 0; r < s; ++r)
      for (int l = 0; l < s; ++l)
        EXPECT_EQ(stale_by_timeline(r, l, s, s), stale_in_official_code(r, l, s))
            << "N = S = " << s << " r " << r << " l " << l;
  // The notes' count for N = 8, S = 4 (d = 1): 16 of the 32 pairs stale, 4, 3, 3, 2, 2, 1, 1, 0 per micro-batch,
  // where the code makes 6 of them stale (3, 2, 1 for ranks 0 to 2).
  const int timeline_per_rank[8] = {4, 3, 3, 2, 2, 1, 1, 0}, code_per_rank[8] = {3, 2, 1, 0, 0, 0, 0, 0};
  for (int r = 0; r < 8; ++r) {
    int by_timeline = 0, by_code = 0;
    for (int l = 0; l < 4; ++l) {
      by_timeline += stale_by_timeline(r, l, 8, 4);
      by_code += stale_in_official_code(r, l, 4);
    }
    EXPECT_EQ(by_timeline, timeline_per_rank[r]) << "rank " << r;
    EXPECT_EQ(by_code, code_per_rank[r]) << "rank " << r;
  }
  // The two differ for the N != S cases the trajectories cover (Tandem follows the code there).
  EXPECT_TRUE(stale_in_official_code(0, 2, 4) && !stale_by_timeline(0, 2, 2, 4));  // N = 2, S = 4
  EXPECT_TRUE(stale_in_official_code(1, 0, 4) && !stale_by_timeline(1, 0, 2, 4));
  EXPECT_TRUE(!stale_in_official_code(0, 2, 3) && stale_by_timeline(0, 2, 5, 3));  // N = 5, S = 3
  EXPECT_TRUE(!stale_in_official_code(3, 0, 3) && stale_by_timeline(3, 0, 5, 3));
}

// CDP-v2 with N = S = 3 micro-batches and stages: the setting of the side-by-side runs below.
TrainerOptions cdp_v2_three_by_three() {
  TrainerOptions o;
  o.rule = Rule::CdpV2;
  o.micro_batches = 3;
  o.stages = 3;
  return o;
}

// EXPECTs that micro-batch `i`'s view of the parameters is bitwise the same in a and b.
void expect_same_view(const CyclicTrainer& a, const CyclicTrainer& b, int i, const std::string& what) {
  for (auto& p : pair_by_name(a.view_parameters(i), b.view_parameters(i)))
    tandem::testing::expect_bitwise_equal(p.first, p.second, what);
}

TEST(Rules, AllReduceAndChainGiveTheSameTrajectory) {
  const testing::SeededResnet tiny({4, 3, 8, 8});
  TrainerOptions o = cdp_v2_three_by_three();
  o.sync = GradSync::AllReduce;
  CyclicTrainer a = tiny.trainer(o);
  o.sync = GradSync::Chain;
  CyclicTrainer b = tiny.trainer(o);
  a.train(3, tiny.batches);
  b.train(3, tiny.batches);
  for (int i = 0; i < 3; ++i) expect_same_view(a, b, i, "rank " + std::to_string(i));
}

TEST(Rules, CdpV2InModelParallelDiffersFromPerRankCopiesOnlyThroughALearningRateChange) {
  // The per-rank stale copy applies an update with the following round's rate; mp's versions are the true
  // iterates. With the rate halved at round 2, they agree bitwise until then; the stale stages of rank 0 then
  // differ (by the rate difference times a momentum buffer) while rank 2, never stale, still agrees.
  const testing::SeededResnet tiny({4, 3, 8, 8});
  TrainerOptions o = cdp_v2_three_by_three();
  o.stage_starts = {0, 5, 9};
  o.lr_schedule = optim::step_lr(2, 0.5);
  CyclicTrainer copies = tiny.trainer(o);
  o.mode = Mode::ModelParallel;
  CyclicTrainer versions = tiny.trainer(o);
  copies.train(2, tiny.batches);
  versions.train(2, tiny.batches);
  for (int i = 0; i < 3; ++i)
    expect_same_view(copies, versions, i, "before the rate change, rank " + std::to_string(i));
  copies.train(1, tiny.batches);
  versions.train(1, tiny.batches);
  double stale_diff = 0;
  for (auto& p : pair_by_name(copies.view_parameters(0), versions.view_parameters(0)))
    stale_diff = std::max(stale_diff, tandem::testing::max_rel_error(p.first, p.second));
  EXPECT_GT(stale_diff, 0.0);
  expect_same_view(copies, versions, 2, "rank 2 (never stale)");
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
  const testing::SeededResnet tiny({4, 3, 8, 8});
  for (Mode mode : {Mode::DpWorkers, Mode::ModelParallel, Mode::Zero}) {
    TrainerOptions o = cdp_v2_three_by_three();
    o.mode = mode;
    CyclicTrainer straight = tiny.trainer(o);
    straight.train(2, tiny.batches);
    NamedTensors saved = straight.checkpoint_state();
    straight.train(2, tiny.batches);
    CyclicTrainer resumed = tiny.trainer(o);
    resumed.load_checkpoint_state(saved);
    EXPECT_EQ(resumed.round(), 2);
    resumed.train(2, tiny.batches);
    for (auto& p : pair_by_name(straight.checkpoint_state(), resumed.checkpoint_state()))
      tandem::testing::expect_bitwise_equal(p.first, p.second, mode_name(mode));
    // A checkpoint of another configuration is refused.
    o.rule = Rule::Dp;
    CyclicTrainer other = tiny.trainer(o);
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
