// The AHD profiler on CPU workers, and the runner's files: block checkpoints that resume bitwise, the
// stitched student that loads into its registry model (as tools:train --resume does), and the trace.
#include <gtest/gtest.h>

#include <fstream>
#include <nlohmann/json.hpp>
#include <sstream>
#include <string>

#include "models/checkpoint.h"
#include "models/registry.h"
#include "parallel/bd/profiler.h"
#include "parallel/bd/session.h"
#include "parallel/communicator.h"
#include "parallel/worker.h"
#include "runtime/formats/json.h"
#include "runtime/formats/safetensors.h"
#include "runtime/optim/lr_schedule.h"
#include "tests/bd/distill_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace bd {
namespace {

std::string temp_dir(const std::string& name) {
  const char* base = std::getenv("TEST_TMPDIR");
  std::string dir =
      std::string(base ? base : "/tmp") + "/" + name + "_" + std::to_string(tandem::testing::fresh_seed() % 100000);
  std::string cmd = "mkdir -p " + dir;
  EXPECT_EQ(std::system(cmd.c_str()), 0);
  return dir;
}

TEST(Profiler, MeasuresEveryBlockAndFactorAndEveryRankGetsTheSameProfile) {
  const uint64_t seed = tandem::testing::fresh_seed();
  Workload w(testing::compression_workload(seed));
  RunContext ctx = testing::make_context(w, seed, 16, 8, 1);
  ProfileOptions o;
  o.warmup = 0;
  o.trials = 2;
  std::vector<Worker> workers = make_workers("cpu:2");
  auto comms = make_local_group(workers);
  std::vector<std::string> json(2);
  BlockProfile p;
  run_on_workers(workers, [&](Worker& wk) {
    BlockProfile mine = profile_blocks(ctx, o, wk, *comms[wk.rank]);
    json[wk.rank] = mine.to_json().dump();
    if (wk.rank == 0) p = mine;
  });
  EXPECT_EQ(json[0], json[1]);
  ASSERT_EQ(p.blocks(), 4);
  ASSERT_EQ(p.max_replicas(), 2);
  EXPECT_EQ(p.batch, 8);
  for (int g = 0; g < 2; ++g)
    for (int b = 0; b < 4; ++b) {
      EXPECT_GT(p.teacher_s[g][b], 0);
      EXPECT_GT(p.student_s[g][b], 0);
      EXPECT_GT(p.memory[g][b], 0);
      EXPECT_EQ(p.allreduce_s[g][b] > 0, g == 1) << "g " << g + 1 << " block " << b;
    }
  // Block 0's activations dominate its memory: half the rows need less.
  EXPECT_LT(p.memory[1][0], p.memory[0][0]);
  for (int b = 0; b < 3; ++b) EXPECT_GT(p.relay_s[b], 0);
  EXPECT_EQ(p.relay_s[3], 0);
  ASSERT_EQ(p.load_s.size(), 2u);
  EXPECT_GT(p.load_s[0], 0);
  EXPECT_EQ(BlockProfile::from_json(parse_json(json[0])).to_json().dump(), json[0]);
  Plan plan = plan_hybrid(p, 2);
  EXPECT_EQ(plan.workers(), 2);
}

// 2 epochs at once, or 1 epoch, a stop, and a resume of the second: the same weights, bit for bit.
TEST(Checkpoints, AStoppedAndResumedRunEndsBitwiseWhereAnUninterruptedOneDoes) {
  const uint64_t seed = tandem::testing::fresh_seed();
  Workload w(testing::nas_workload(seed));
  RunContext ctx = testing::make_context(w, seed, 16, 8, 2);
  Plan plan;
  plan.stages = {{0, 1, 2}, {2, 4, 1}, {5, 5, 1}};
  for (const Layout& layout : {pipeline_layout(Strategy::AHD, plan, w.blocks(), 4), dp_layout(w.blocks(), 4)}) {
    const std::string what = layout.describe();
    testing::BlockWeights straight = testing::run_in_process(ctx, layout);
    RunContext part = ctx;
    part.out_dir = temp_dir("resume");
    part.train.stop_after = 1;
    StrategyResult first;
    testing::run_in_process(part, layout, &first);
    EXPECT_EQ(first.epochs_run, 1) << what;
    part.train.stop_after = 0;
    part.resume = true;
    StrategyResult second;
    testing::BlockWeights resumed = testing::run_in_process(part, layout, &second);
    EXPECT_EQ(second.epochs_run, 1) << what;
    testing::expect_same_weights(resumed, straight, what + " resumed");
    // Both epochs' losses are reported after the resume (the first from the checkpoints).
    for (const auto& per_block : second.loss) {
      EXPECT_GT(per_block[0], 0) << what;
      EXPECT_GT(per_block[1], 0) << what;
    }
  }
}

TEST(Checkpoints, TheStitchedStudentLoadsIntoItsRegistryModelAsATrainingCheckpoint) {
  const uint64_t seed = tandem::testing::fresh_seed();
  Workload w(testing::compression_workload(seed));
  RunContext ctx = testing::make_context(w, seed, 16, 8, 1);
  ctx.out_dir = temp_dir("stitched");
  Plan plan;
  plan.stages = {{0, 0, 1}, {1, 1, 1}, {2, 2, 1}, {3, 3, 1}};
  testing::BlockWeights blocks = testing::run_in_process(ctx, pipeline_layout(Strategy::TR, plan, w.blocks(), 4));

  const std::string path = ctx.out_dir + "/student.safetensors";
  SafetensorsContents c = load_safetensors(path);
  const std::string spec = c.metadata.at("tandem.model");
  EXPECT_EQ(spec, w.spec().teacher + ",separable,seed=" + std::to_string(w.spec().student_seed));
  auto [name, options] = models::parse_model_spec(spec);
  auto model = models::make_model(name, options);
  optim::Sgd sgd(optim::single_group(model->named_parameters()), optim::SgdOptions{});
  optim::LrScheduler sched(sgd, optim::constant_lr());
  SafetensorsMetadata meta = models::load_checkpoint(path, *model, &sgd, &sched);
  EXPECT_EQ(meta.at("epoch"), "0");
  EXPECT_EQ(sched.position(), 0);
  // Every block's trained tensors are in the model under the same names.
  NamedTensors sd = model->state_dict();
  int found = 0;
  for (const auto& [b, tensors] : blocks)
    for (const auto& [key, t] : tensors)
      for (const auto& [mkey, m] : sd)
        if (mkey == key) {
          tandem::testing::expect_bitwise_equal(m, t, key);
          ++found;
        }
  EXPECT_EQ(found, static_cast<int>(sd.size()));

  std::ifstream f(ctx.out_dir + "/trace.json");
  std::stringstream text;
  text << f.rdbuf();
  Json trace = parse_json(text.str());
  EXPECT_GT(trace.at("traceEvents").size(), 10u);
}

}  // namespace
}  // namespace bd
}  // namespace parallel
}  // namespace tandem
