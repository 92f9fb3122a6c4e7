// Every strategy in 4 MPI processes (the binary re-launches itself under mpirun; the MPI backend moves CPU
// tensors) gives bitwise the weights of the same strategy on 4 in-process workers with local communicators.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "parallel/bd/runner.h"
#include "parallel/communicator.h"
#include "parallel/mpi_comm.h"
#include "parallel/worker.h"
#include "runtime/safetensors.h"
#include "tests/bd/distill_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace bd {
namespace {

constexpr int kProcesses = 4;

Communicator& world() {
  static std::shared_ptr<Communicator> comm = make_mpi_communicator();
  return *comm;
}

// Rank 0's seed, broadcast, so that every process builds the same workload and data.
uint64_t shared_seed() {
  Tensor s = from_vector(std::vector<int64_t>{static_cast<int64_t>(tandem::testing::fresh_seed() >> 2)}, {1},
                         Device::cpu());
  world().broadcast(s, 0);
  return static_cast<uint64_t>(s.item<int64_t>());
}

// Every process learns whether any failed, so that rank 0's report (the one Bazel reads) covers them all.
class MpiStrategies : public ::testing::Test {
 protected:
  void TearDown() override {
    Tensor failed = full({1}, HasFailure() ? 1.0 : 0.0, DType::I32);
    world().all_reduce(failed);
    EXPECT_EQ(failed.item<int32_t>(), 0) << "another process failed this test (see its output)";
  }
};

// Runs `layout` with this process as rank world().rank(), the block checkpoints going to `dir`; then rank 0
// runs it in-process and compares the checkpoints' weights with the in-process ones.
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
}

Plan plan_of(const std::vector<Stage>& stages) {
  Plan p;
  p.stages = stages;
  return p;
}

TEST_F(MpiStrategies, EveryStrategyOnTheNasWorkloadMatchesInProcessBitwise) {
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

TEST_F(MpiStrategies, ReplicatedStagesOfTheCompressionWorkloadMatchInProcessBitwise) {
  const uint64_t seed = shared_seed();
  Workload w(testing::compression_workload(seed));
  RunContext ctx = testing::make_context(w, seed, 16, 8, 1);
  const std::string dir = std::string(std::getenv("TEST_TMPDIR") ? std::getenv("TEST_TMPDIR") : "/tmp") +
                          "/bd_mpi_c_" + std::to_string(seed % 100000);
  run_and_compare(ctx, pipeline_layout(Strategy::AHD, plan_of({{0, 0, 3}, {1, 3, 1}}), w.blocks(), kProcesses),
                  dir + "/ahd");
}

// Runs this binary in kProcesses processes: shared memory only, as root, oversubscribed, yielding the
// cores while idle (rank 0 runs the in-process comparison while the others wait).
int relaunch_under_mpirun(int argc, char** argv) {
  std::vector<std::string> args = {"mpirun", "-np", std::to_string(kProcesses), "--oversubscribe",
                                   "--allow-run-as-root", "--bind-to", "none", "--mca", "btl", "self,vader",
                                   "--mca", "pml", "ob1", "--mca", "osc", "^ucx", "--mca", "mpi_yield_when_idle",
                                   "1", "--timeout", "240"};
  for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
  std::vector<char*> cargs;
  for (auto& a : args) cargs.push_back(&a[0]);
  cargs.push_back(nullptr);
  setenv("TMPDIR", "/tmp", 1);  // OpenMPI's session sockets need short paths
  std::fflush(stdout);
  execvp("mpirun", cargs.data());
  std::fprintf(stderr, "cannot run mpirun (%s): install openmpi-bin (tools/tandem deps does)\n", std::strerror(errno));
  return 1;
}

}  // namespace
}  // namespace bd
}  // namespace parallel
}  // namespace tandem

int main(int argc, char** argv) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr) return tandem::parallel::bd::relaunch_under_mpirun(argc, argv);
  if (std::string(rank) != "0") {
    // Only rank 0 writes Bazel's test report and owns its premature-exit marker.
    unsetenv("XML_OUTPUT_FILE");
    unsetenv("GTEST_OUTPUT");
    unsetenv("TEST_PREMATURE_EXIT_FILE");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}
