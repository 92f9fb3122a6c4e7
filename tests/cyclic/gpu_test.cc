// Cyclic DP on GPU workers (3 SM partitions of one GPU, and 3 GPUs) in deterministic mode with TF32 off: each
// rule in each mode (CDP-v1 in bf16 too) equals the same run on CPU workers within a tolerance, the modes give
// bitwise the parameters trainer.h says they share, and the model state averaged over workers on several GPUs is
// the mean of their own states.
#include <gtest/gtest.h>

#include <algorithm>
#include <string>
#include <tuple>
#include <vector>

#include "parallel/cyclic/trainer.h"
#include "runtime/tensor/precision.h"
#include "tests/cyclic/cyclic_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace cyclic {
namespace {

using testing::make_trainer;
using testing::pair_by_name;

// The convnet without batch norm: the GPU's cuDNN and cuBLAS (or the simulator's) and the CPU backend, which
// accumulates in double, differ per op by f32 rounding in another order (about 1e-7 relative), and nothing in
// this model amplifies it: over 36 seeds (6 runs of the 6 rule and worker cases, simulated GPU) two rounds
// differed by at most 1.2e-7 (relative to each tensor's magnitude, see max_rel_error), while they moved the
// weights by 0.025 to 0.18 by the same measure, so a lost, repeated or stale update stays far above 1e-6. (With
// batch norm over micro-batches of 2 images the last stage normalizes 2 values per channel, and rounding
// differences grow to order 1 in two rounds: that model is compared bitwise only, below.)
constexpr double kCpuTolerance = 1e-6;

// The largest max_rel_error over the floating tensors of two named lists, paired by name.
double max_error(const NamedTensors& got, const NamedTensors& want) {
  double worst = 0;
  for (auto& p : pair_by_name(want, got))
    if (is_floating(p.first.dtype())) worst = std::max(worst, tandem::testing::max_rel_error(p.second, p.first));
  return worst;
}

void expect_same(const NamedTensors& got, const NamedTensors& want, const std::string& what) {
  for (auto& p : pair_by_name(want, got)) tandem::testing::expect_bitwise_equal(p.second, p.first, what);
}

struct Workers {
  const char* spec;
  int gpus;
  const char* name;
};
const Workers kWorkers[] = {{"cuda:0/3", 1, "sm_partitions"}, {"cuda:0-2", 3, "three_gpus"}};

// Under bf16 the same products are rounded to bf16 (8 significant bits) after either accumulation, so the two
// agree unless a sum falls within that 1e-7 of a bf16 rounding boundary; then an element differs by one bf16 step,
// 2^-8 of itself. Even with every gradient one step off, the two rounds' displacement (at most 0.18 of the
// weights, above) would differ by 2^-8 of it: 0.18 / 256 = 7e-4, still far below a lost or stale update (0.025
// and up). Measured on the simulated GPU: bitwise equal in 48 comparisons (6 seeds, 4 modes on 2 kinds of
// workers) with the CPU's convolutions on widened copies, and in 100 (10 seeds) with oneDNN's native bf16 ones.
constexpr double kCpuToleranceBf16 = 0.18 / 256;

class CyclicGpu : public ::testing::TestWithParam<std::tuple<Rule, Workers, Precision>> {};

// 3 stages, 3 micro-batches of 2 images, 2 rounds at a constant rate (under which CDP-v2's modes agree too).
TEST_P(CyclicGpu, ModesMatchEachOtherBitwiseAndTheCpuWithinTolerance) {
  const Rule rule = std::get<0>(GetParam());
  const Workers workers = std::get<1>(GetParam());
  const Precision precision = std::get<2>(GetParam());
  const double tolerance = precision == Precision::F32 ? kCpuTolerance : kCpuToleranceBf16;
  TD_REQUIRE_GPUS(workers.gpus);
  PrecisionGuard policy(precision);
  tandem::testing::NumericsGuard numerics(/*tf32=*/false, /*deterministic_mode=*/true);
  const uint64_t seed = tandem::testing::fresh_seed();
  const Shape input{2, 3, 8, 8};
  const ModelFactory factory = testing::plain_convnet(3, seed);
  const MicroBatchFn batches = testing::seeded_batches(input, seed + 1);
  TrainerOptions o;
  o.rule = rule;
  o.micro_batches = 3;
  o.stages = 3;
  o.weight_decay = 1e-2;
  // Every mode computes micro-batch r's stage l with the same kernels on the same inputs (on one GPU, or on
  // identical ones: the simulated GPUs choose the same conv algorithms) and sums the micro-batches' gradients
  // in the same order, whether by all-reduce or along the chain, and the NCCL communicator sums as the local
  // one does: micro-batch 0's parameters for the next round are the same bits in every configuration.
  struct Run {
    Mode mode;
    GradSync sync;
    const char* backend;
  };
  std::vector<Run> runs{{Mode::DpWorkers, GradSync::AllReduce, "local"},
                        {Mode::DpWorkers, GradSync::Chain, "local"},
                        {Mode::ModelParallel, GradSync::AllReduce, "local"},
                        {Mode::Zero, GradSync::AllReduce, "local"}};
  if (workers.gpus > 1)  // NCCL puts one rank on each GPU
    for (Mode mode : {Mode::DpWorkers, Mode::ModelParallel, Mode::Zero})
      runs.push_back({mode, GradSync::AllReduce, "nccl"});
  NamedTensors first;
  for (const Run& run : runs) {
    const std::string what = std::string(rule_name(rule)) + " " + mode_name(run.mode) + " (" + sync_name(run.sync) +
                             ", " + run.backend + ") on " + workers.spec;
    o.mode = run.mode;
    o.sync = run.sync;
    o.comm_backend = run.backend;
    CyclicTrainer gpu = make_trainer(factory, input, o, workers.spec);
    gpu.train(2, batches);
    const NamedTensors view = gpu.view_parameters(0);
    if (first.empty())
      first = view;
    else
      expect_same(view, first, what + " vs the first run");
    if (std::string(run.backend) == "nccl") continue;  // the local run of the mode compared with the CPU already
    o.comm_backend = "local";
    CyclicTrainer cpu = make_trainer(factory, input, o);
    cpu.train(2, batches);
    // Zero's owners hold the versions micro-batch 0 needs only.
    for (int i = 0; i < (run.mode == Mode::Zero ? 1 : 3); ++i)
      EXPECT_LE(max_error(gpu.view_parameters(i), cpu.view_parameters(i)), tolerance)
          << what << ", micro-batch " << i << " vs the CPU";
    EXPECT_LE(max_error(gpu.model_state(), cpu.model_state()), tolerance) << what << ": model state vs the CPU";
  }
  EXPECT_GT(max_error(first, factory()->state_dict()), 1e-3) << "the rounds did not train";
}

std::string case_name(const ::testing::TestParamInfo<std::tuple<Rule, Workers, Precision>>& info) {
  std::string s = std::string(rule_name(std::get<0>(info.param))) + "_" + std::get<1>(info.param).name;
  if (std::get<2>(info.param) != Precision::F32) s += "_bf16";
  for (char& ch : s)
    if (ch == '-') ch = '_';
  return s;
}

INSTANTIATE_TEST_SUITE_P(RulesOnWorkers, CyclicGpu,
                         ::testing::Combine(::testing::Values(Rule::Dp, Rule::CdpV1, Rule::CdpV2),
                                            ::testing::ValuesIn(kWorkers), ::testing::Values(Precision::F32)),
                         case_name);
// bf16 (CI time is short): one rule on three GPUs, where NCCL carries mp's bf16 messages too.
INSTANTIATE_TEST_SUITE_P(Bf16OnWorkers, CyclicGpu,
                         ::testing::Combine(::testing::Values(Rule::CdpV1), ::testing::Values(kWorkers[1]),
                                            ::testing::Values(Precision::BF16)),
                         case_name);

// The micro-batches come from pageable host memory (seeded_batches makes ordinary CPU tensors): the trainer
// must hand its lanes page-locked copies, else every copy to a GPU inside a lane stalls that lane's thread.
TEST(CyclicGpuLanes, MicroBatchesReachTheGpusWithoutStallingALane) {
  TD_REQUIRE_GPUS(1);
  const uint64_t seed = tandem::testing::fresh_seed();
  const Shape input{2, 3, 8, 8};
  TrainerOptions o;
  o.rule = Rule::CdpV1;
  o.micro_batches = 3;
  o.stages = 3;
  for (Mode mode : {Mode::DpWorkers, Mode::ModelParallel}) {
    o.mode = mode;
    CyclicTrainer trainer = make_trainer(testing::plain_convnet(3, seed), input, o, "cuda:0/3");
    const int64_t before = lane_pageable_copies();
    trainer.train(1, testing::seeded_batches(input, seed + 1));
    EXPECT_EQ(lane_pageable_copies() - before, 0) << mode_name(mode);
  }
}

// model_state averages over the workers (dp-workers: CDP-v2's parameter copies and the batch-norm running
// statistics; zero: the statistics) while each worker's state lies on its own GPU. The reference: each worker's
// tensors as checkpoint_state gives them, summed on the host in worker order in f32 and scaled by 1/3 formed in
// f64 and rounded once (Communicator::all_reduce's arithmetic); integer tensors are worker 0's.
TEST(CyclicGpuState, ModelStateOnThreeGpusIsTheMeanOfTheWorkersStates) {
  TD_REQUIRE_GPUS(3);
  const testing::SeededResnet tiny({2, 3, 8, 8});
  TrainerOptions o;
  o.rule = Rule::CdpV2;
  o.micro_batches = 3;
  o.stages = 3;
  for (Mode mode : {Mode::DpWorkers, Mode::Zero}) {
    o.mode = mode;
    CyclicTrainer trainer = tiny.trainer(o, "cuda:0-2");
    trainer.train(2, tiny.batches);
    NamedTensors saved = trainer.checkpoint_state();
    auto of_worker = [&](int w, const std::string& name) {
      for (auto& kv : saved)
        if (kv.first == "cyclic.w" + std::to_string(w) + "." + name) return kv.second;
      return Tensor();
    };
    int averaged = 0;
    for (auto& [name, got] : trainer.model_state()) {
      std::vector<Tensor> each;
      for (int w = 0; w < 3; ++w) each.push_back(of_worker(w, name));
      if (!each[0].defined()) continue;  // zero's parameters are the owners' masters
      ASSERT_TRUE(each[1].defined() && each[2].defined()) << name;
      Tensor want = each[0].to(Device::cpu());
      if (is_floating(got.dtype())) {
        std::vector<float> sum = each[0].to_vector<float>(), b = each[1].to_vector<float>(),
                           c = each[2].to_vector<float>();
        for (size_t k = 0; k < sum.size(); ++k)
          sum[k] = static_cast<float>(static_cast<double>((sum[k] + b[k]) + c[k]) * (1.0 / 3.0));
        want = from_vector(sum, got.shape(), Device::cpu());
        ++averaged;
      }
      tandem::testing::expect_bitwise_equal(got, want, std::string(mode_name(mode)) + " " + name);
    }
    EXPECT_GT(averaged, 0) << mode_name(mode);
  }
  EXPECT_NO_THROW(current_stream(Device::cuda(0)).synchronize()) << "a fault left on cuda:0";
}

}  // namespace
}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
