// GoogleTest programs that run in several MPI processes: the binary re-launches itself under mpirun, every
// process runs the tests, and a failure on any process fails rank 0's report (the one Bazel reads).
#pragma once

#include <gtest/gtest.h>

#include <cstdint>

#include "parallel/communicator.h"

namespace tandem {
namespace testing {

// This process's communicator over every process of the job (the MPI backend).
parallel::Communicator& mpi_world();
// A seed every process agrees on: rank 0's fresh_seed(), broadcast.
uint64_t mpi_shared_seed();

// Fixture: after each test every process learns whether any process failed it.
class MpiTest : public ::testing::Test {
 protected:
  void TearDown() override;
};

// The main() of such a program: outside mpirun it re-runs itself as `processes` processes (shared memory
// only, as root, oversubscribed, yielding idle cores, killed after timeout_s); inside, it runs the tests.
int mpi_test_main(int argc, char** argv, int processes, int timeout_s);

}  // namespace testing
}  // namespace tandem
