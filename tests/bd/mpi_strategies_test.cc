// Every strategy in 4 MPI processes (the binary re-launches itself under mpirun; the MPI backend moves CPU
// tensors) gives bitwise the weights of the same strategy on 4 in-process workers with local communicators,
// and those of the sequential reference of blockwise distillation (bitwise for unreplicated blocks, within
// testing::kReplicatedTolerance for replicated ones).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/bd/runner.h"
#include "parallel/bd/session.h"
#include "parallel/communicator.h"
#include "parallel/mpi_comm.h"
#include "parallel/worker.h"
#include "runtime/formats/safetensors.h"
#include "tests/bd/distill_testing.h"
#include "tests/parallel/mpi_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace bd {
namespace {

constexpr int kProcesses = 4;

Communicator& world() { return tandem::testing::mpi_world(); }
uint64_t shared_seed() { return tandem::testing::mpi_shared_seed(); }
using MpiStrategies = tandem::testing::MpiTest;

// Runs `layout` with this process as rank world().rank(), the block checkpoints going to `dir`; then rank 0
// runs it in-process and compares the checkpoints' weights with the in-process ones and the reference's.
void run_and_compare(const RunContext& base, const Layout& layout, const std::string& dir) {
  RunContext ctx = base;
  ctx.out_dir = dir;
  if (world().rank() == 0) {
    ASSERT_EQ(std::system(("mkdir -p " + dir).c_str()), 0);
  }
  world().barrier();
  std::vector<Worker> workers = make_workers("cpu:" + std::to_string(kProcesses));
  std::vector<Worker> mine = {workers[static_cast<size_t>(world().rank())]};
  run_on_workers(mine, [&](Worker& w) { run_strategy(ctx, layout, nullptr, w, world()); });
  world().barrier();
  if (world().rank() != 0) return;
  testing::BlockWeights in_process = testing::run_in_process(base, layout);
  testing::BlockWeights from_mpi;
  for (const auto& [b, tensors] : in_process) {
    SafetensorsContents c = load_safetensors(dir + "/block" + std::to_string(b) + ".safetensors");
    NamedTensors model;
    for (const auto& [name, t] : tensors) {
      const Tensor* found = c.find(name);
      ASSERT_NE(found, nullptr) << name;
      model.emplace_back(name, *found);
    }
    from_mpi[b] = model;
  }
  testing::expect_same_weights(from_mpi, in_process, layout.describe() + " over MPI");
  testing::expect_matches_reference(from_mpi, base, layout, layout.describe() + " over MPI");
}

Plan plan_of(const std::vector<Stage>& stages) {
  Plan p;
  p.stages = stages;
  return p;
}

TEST_F(MpiStrategies, EveryStrategyOnTheNasWorkloadMatchesInProcessAndTheReference) {
  EXPECT_EQ(world().size(), kProcesses);
  const uint64_t seed = shared_seed();
  Workload w(testing::nas_workload(seed));
  RunContext ctx = testing::make_context(w, seed, 16, 8, 2);
  const std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/bd_mpi_" +
                          std::to_string(seed % 100000);
  const Plan pipe = plan_of({{0, 1, 1}, {2, 3, 1}, {4, 4, 1}, {5, 5, 1}});
  Layout ls = dp_layout(w.blocks(), kProcesses);
  ls.strategy = Strategy::LS;
  ls.bins = {{0, 5}, {1}, {2, 3}, {4}};
  run_and_compare(ctx, dp_layout(w.blocks(), kProcesses), dir + "/dp");
  run_and_compare(ctx, ls, dir + "/ls");
  run_and_compare(ctx, pipeline_layout(Strategy::TR, pipe, w.blocks(), kProcesses), dir + "/tr");
  run_and_compare(ctx, pipeline_layout(Strategy::DPU, pipe, w.blocks(), kProcesses), dir + "/dpu");
  run_and_compare(ctx, pipeline_layout(Strategy::AHD, plan_of({{0, 1, 2}, {2, 5, 2}}), w.blocks(), kProcesses),
                  dir + "/ahd");
}

TEST_F(MpiStrategies, ReplicatedStagesOfTheCompressionWorkloadMatchInProcessAndTheReference) {
  const uint64_t seed = shared_seed();
  Workload w(testing::compression_workload(seed));
  RunContext ctx = testing::make_context(w, seed, 16, 8, 1);
  const std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") + "/bd_mpi_c_" +
                          std::to_string(seed % 100000);
  run_and_compare(ctx, pipeline_layout(Strategy::AHD, plan_of({{0, 0, 3}, {1, 3, 1}}), w.blocks(), kProcesses),
                  dir + "/ahd");
}

// A session under mpirun: each process makes only its own worker of the spec (the spec names all four), runs
// it over the MPI backend, and rank 0 reports for all of them.
TEST_F(MpiStrategies, ASessionRunsOneWorkerPerProcess) {
  ASSERT_TRUE(launched_by_mpi());
  SessionOptions o;
  o.workload = testing::compression_workload(shared_seed());
  o.dataset = "synthetic:n=32,h=16,w=16,c=3";
  o.train.batch = 8;
  o.train.epochs = 1;
  o.workers = "cpu:" + std::to_string(kProcesses);
  o.strategies = {Strategy::DP};
  o.profile.trials = 1;
  o.profile.warmup = 0;
  const SessionReport r = run_session(o, nullptr);
  EXPECT_EQ(r.root, world().rank() == 0);
  EXPECT_EQ(r.workers, kProcesses);
  EXPECT_EQ(r.device, "4 x cpu");
  if (!r.root) return;
  ASSERT_EQ(r.results.size(), 1u);
  EXPECT_EQ(r.results[0].epochs_run, 1);
  EXPECT_EQ(r.results[0].busy_fraction.size(), static_cast<size_t>(kProcesses)) << "every rank took part";
}

}  // namespace
}  // namespace bd
}  // namespace parallel
}  // namespace tandem

int main(int argc, char** argv) {
  return tandem::testing::mpi_test_main(argc, argv, tandem::parallel::bd::kProcesses, 240);
}
