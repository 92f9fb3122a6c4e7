// Bad distillation configurations get clear errors: unknown models, teacher/student block mismatches, more
// stages than workers, memory limits no plan fits, worker specs that do not parse, and the like.
#include <gtest/gtest.h>

#include <string>

#include "parallel/bd/session.h"
#include "parallel/bd/strategy.h"
#include "parallel/bd/workload.h"
#include "runtime/base/error.h"
#include "tests/bd/distill_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace bd {
namespace {

using tandem::testing::expect_error;

// A session distilling the compression workload (seed `workload_seed`) on `images` synthetic 16x16 RGB images
// in batches of 8, on `workers`.
SessionOptions small_session(uint64_t workload_seed, int images, const std::string& workers) {
  SessionOptions o;
  o.workload = testing::compression_workload(workload_seed);
  o.dataset = "synthetic:n=" + std::to_string(images) + ",h=16,w=16,c=3";
  o.train.batch = 8;
  o.workers = workers;
  return o;
}

WorkloadSpec with(WorkloadSpec s, const std::string& teacher, const std::string& student) {
  if (!teacher.empty()) s.teacher = teacher;
  if (!student.empty()) s.student = student;
  return s;
}

TEST(Errors, UnknownTeacherOrStudentModel) {
  const WorkloadSpec base = testing::compression_workload(1);
  expect_error<ValueError>([&] { Workload w(with(base, "resnet99:cifar", "")); }, "unknown model 'resnet99'");
  expect_error<ValueError>([&] { Workload w(with(base, "", "vgg11:cifar")); }, "unknown model 'vgg11'");
  expect_error<ValueError>([&] { Workload w(with(base, "resnet18:cifar,depth=3", "")); }, "unknown key 'depth'");
}

TEST(Errors, BlockCountOrShapeMismatchBetweenTeacherAndStudent) {
  // MobileNetV2 has 6 blocks, ResNet-18 4.
  expect_error<ValueError>(
      [&] { Workload w(with(testing::nas_workload(1), "", "resnet18:cifar,width=4,classes=10")); },
      "block-count mismatch: the teacher 'mobilenet_v2:cifar,width_mult=0.25,classes=10,seed=1' has 6 blocks but "
      "the student 'resnet18:cifar,width=4,classes=10' has 4");
  // Same block count, other widths.
  expect_error<ShapeError>(
      [&] { Workload w(with(testing::compression_workload(1), "", "resnet18:cifar,width=8,classes=10")); },
      "gives [1, 8, 16, 16] but the teacher's block 0 gives [1, 4, 16, 16]");
  // The data's channels must be the teacher's.
  WorkloadSpec gray = testing::compression_workload(1);
  gray.sample = {1, 16, 16};
  expect_error<ValueError>([&] { Workload w(gray); }, "takes 3-channel images but the data has 1 channels");
  WorkloadSpec missing = testing::compression_workload(1);
  missing.teacher_weights = "/nonexistent/teacher.safetensors";
  EXPECT_THROW(Workload w(missing), IoError);
}

TEST(Errors, MoreStagesThanWorkersOrBlocks) {
  Plan five;
  five.stages = {{0, 0, 1}, {1, 1, 1}, {2, 2, 1}, {3, 4, 1}, {5, 5, 1}};
  expect_error<ValueError>([&] { pipeline_layout(Strategy::TR, five, 6, 4); },
                           "the plan uses 5 workers but 4 are given");
  BlockProfile p;
  p.teacher_s = p.student_s = p.allreduce_s = {{1, 1, 1, 1}};
  p.memory = {{1, 1, 1, 1}};
  p.relay_s = {0, 0, 0, 0};
  expect_error<ValueError>([&] { plan_pipeline(p, 8); }, "a pipeline of 8 stages needs at least 8 blocks");
  SessionOptions o = small_session(1, 32, "cpu:8");
  o.strategies = {Strategy::TR};
  expect_error<ValueError>([&] { run_session(o, nullptr); }, "8 workers need at least 8 blocks, the teacher has 4");
}

TEST(Errors, AMemoryLimitNoPlanFits) {
  BlockProfile p;
  p.teacher_s = p.student_s = p.allreduce_s = {{1, 1}, {0.5, 0.5}};
  p.memory = {{4 << 20, 4 << 20}, {2 << 20, 2 << 20}};
  p.relay_s = {0.1, 0};
  EXPECT_NO_THROW(plan_hybrid(p, 2, 5 << 20, PlanModel::Tandem));
  expect_error<ValueError>([&] { plan_hybrid(p, 2, 1 << 20, PlanModel::Tandem); },
                           "fits the memory limit of 1.0 MiB per worker");
  // The same through a session: the profile is measured, then no plan fits 1 KiB.
  SessionOptions o = small_session(1, 32, "cpu:2");
  o.memory_limit = 1024;
  o.profile.trials = 1;
  o.profile.warmup = 0;
  o.plan_model = PlanModel::Tandem;
  expect_error<ValueError>([&] { run_session(o, nullptr); }, "fits the memory limit");
  // The paper's planner has no memory limit: refused before any worker starts.
  o.plan_model = PlanModel::PipeBD;
  expect_error<ValueError>([&] { run_session(o, nullptr); }, "a memory limit needs the tandem plan model");
}

TEST(Errors, WorkerSpecsStrategiesAndBatchesThatDoNotFit) {
  SessionOptions o = small_session(1, 32, "");
  for (const char* spec : {"cpu:x", "gpu:2", "cpu:0", "cpu:4,cuda:0"}) {
    o.workers = spec;
    EXPECT_THROW(run_session(o, nullptr), ValueError) << spec;
  }
  o.workers = "cpu:3";
  o.strategies = {Strategy::DP};
  expect_error<ValueError>([&] { run_session(o, nullptr); }, "a batch of 8 rows does not split over 3 workers");
  o.workers = "cpu:2";
  o.comm = "carrier-pigeon";
  expect_error<ValueError>([&] { run_session(o, nullptr); }, "unknown communicator 'carrier-pigeon'");
  o.comm = "auto";
  o.dataset = "synthetic:n=4,h=16,w=16,c=3";
  expect_error<ValueError>([&] { run_session(o, nullptr); }, "the dataset has 4 samples, fewer than one batch of 8");
  expect_error<ValueError>([&] { parse_strategies("dp,foo"); },
                           "strategies 'dp,foo': strategy 'foo' is not one of dp, ls, tr, dpu, ahd");
  expect_error<ValueError>([&] { parse_strategies("tr,tr"); }, "named twice");
  expect_error<ValueError>([&] { parse_strategies("dp,,tr"); }, "empty item 2");
  expect_error<ValueError>([&] { parse_strategies("dp,"); }, "empty item 2");
  expect_error<ValueError>([&] { parse_strategies(""); }, "no strategy given");
  EXPECT_EQ(parse_strategies("ahd,dp"), (std::vector<Strategy>{Strategy::AHD, Strategy::DP}));
  EXPECT_EQ(parse_strategies("all"), all_strategies());
  expect_error<ValueError>([&] { parse_teacher_bn("frozen"); }, "'eval' or 'train'");
}

TEST(Errors, AnIssueOrderCommunicatorNeedsSeparateSignals) {
  Workload w(testing::compression_workload(tandem::testing::fresh_seed()));
  RunContext ctx = testing::make_context(w, 3, 16, 8, 1);
  const Layout layout = pipeline_layout(Strategy::DPU, testing::make_plan({{0, 1, 1}, {2, 3, 1}}), w.blocks(), 2);
  std::vector<Worker> workers = make_workers("cpu:2");
  auto ordered = make_local_group(workers, MessageMatching::InIssueOrder);
  auto more_ordered = make_local_group(workers, MessageMatching::InIssueOrder);
  for (bool with_signals : {false, true})
    run_on_workers(workers, [&](Worker& wk) {
      expect_error<ValueError>(
          [&] {
            run_strategy(ctx, layout, nullptr, wk, *ordered[wk.rank],
                         with_signals ? more_ordered[wk.rank].get() : nullptr);
          },
          "need a separate communicator that pairs them by tag");
    });
  // The session's local-ordered backend sets them up and trains.
  SessionOptions o = small_session(2, 16, "cpu:2");
  o.comm = "local-ordered";
  o.strategies = {Strategy::DPU, Strategy::AHD};
  SessionReport r = run_session(o, nullptr);
  ASSERT_EQ(r.results.size(), 2u);
  for (const StrategyResult& s : r.results) EXPECT_EQ(s.epochs_run, 1);
}

}  // namespace
}  // namespace bd
}  // namespace parallel
}  // namespace tandem
