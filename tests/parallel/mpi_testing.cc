// The mpirun re-launch and cross-process failure reporting of multi-process tests.
#include "tests/parallel/mpi_testing.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "parallel/mpi_comm.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {

parallel::Communicator& mpi_world() {
  static std::shared_ptr<parallel::Communicator> comm = parallel::make_mpi_communicator();
  return *comm;
}

uint64_t mpi_shared_seed() {
  Tensor s = from_vector(std::vector<int64_t>{static_cast<int64_t>(fresh_seed() >> 2)}, {1}, Device::cpu());
  mpi_world().broadcast(s, 0);
  return static_cast<uint64_t>(s.item<int64_t>());
}

void MpiTest::TearDown() {
  Tensor failed = full({1}, HasFailure() ? 1.0 : 0.0, DType::I32);
  mpi_world().all_reduce(failed);
  EXPECT_EQ(failed.item<int32_t>(), 0) << "another process failed this test (see its output)";
}

int mpi_test_main(int argc, char** argv, int processes, int timeout_s) {
  const char* rank = std::getenv("OMPI_COMM_WORLD_RANK");
  if (rank == nullptr) {
    // OpenMPI's session directory holds Unix sockets, whose paths must stay short (Bazel's TMPDIR is long),
    // and jobs running at the same time (tests run in parallel) must share neither it nor the segments of the
    // shared-memory transport (by default in /dev/shm, named after the job).
    char session[] = "/tmp/tandem-mpi.XXXXXX";
    if (mkdtemp(session) == nullptr) {
      std::fprintf(stderr, "cannot create a directory under /tmp for mpirun: %s\n", std::strerror(errno));
      return 1;
    }
    setenv("TMPDIR", session, 1);
    std::vector<std::string> args = {"mpirun",
                                     "-np",
                                     std::to_string(processes),
                                     "--oversubscribe",
                                     "--allow-run-as-root",
                                     "--bind-to",
                                     "none",
                                     "--mca",
                                     "btl",
                                     "self,vader",
                                     "--mca",
                                     "btl_vader_backing_directory",
                                     session,
                                     "--mca",
                                     "pml",
                                     "ob1",
                                     "--mca",
                                     "osc",
                                     "^ucx",
                                     "--mca",
                                     "mpi_yield_when_idle",
                                     "1",
                                     "--timeout",
                                     std::to_string(timeout_s)};
    for (int i = 0; i < argc; ++i) args.push_back(argv[i]);
    std::vector<char*> cargs;
    for (auto& a : args) cargs.push_back(&a[0]);
    cargs.push_back(nullptr);
    std::fflush(stdout);
    pid_t child = fork();
    if (child == 0) {
      execvp("mpirun", cargs.data());
      std::fprintf(stderr, "cannot run mpirun (%s): install openmpi-bin (tools/tandem deps does)\n",
                   std::strerror(errno));
      _exit(127);
    }
    int status = 0;
    bool waited = child > 0 && waitpid(child, &status, 0) == child;
    std::filesystem::remove_all(session);
    if (!waited) return 1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 1;
  }
  if (std::string(rank) != "0") {
    // Only rank 0 writes Bazel's test report and owns its premature-exit marker.
    unsetenv("XML_OUTPUT_FILE");
    unsetenv("GTEST_OUTPUT");
    unsetenv("TEST_PREMATURE_EXIT_FILE");
  }
  ::testing::InitGoogleTest(&argc, argv);
  return RUN_ALL_TESTS();
}

}  // namespace testing
}  // namespace tandem
