// The simulated NCCL's deadlocks turned into faults by the simulator's watchdog (set to 1 s here) instead of
// hanging: a send never received, a collective a rank never calls, a ring of blocking sends, a rank that
// never joins ncclCommInitRank. Each fault names what was waited for.
#include <chrono>
#include <memory>

#include "tests/cudasim/sim_testing.h"

namespace {

using Buffer = cudasim_testing::DeviceBuffer<char>;
using cudasim_testing::contains;
using Stream = cudasim_testing::TestStream;

// Before the simulator reads its configuration (at the first CUDA call).
const bool kConfigured = [] {
  setenv("TANDEM_CUDASIM_WATCHDOG_S", "1", 1);
  setenv("TANDEM_CUDASIM_DEVICES", "8", 1);
  return true;
}();

std::string last() { return ncclGetLastError(nullptr); }

TEST(NcclWatchdog, ASendNeverReceived) {
  ASSERT_TRUE(kConfigured);
  const int devices[2] = {0, 1};
  ncclComm_t comms[2];
  ASSERT_NCCL_OK(ncclCommInitAll(comms, 2, devices));
  Stream s(0);
  Buffer b(0, 64);
  ASSERT_NCCL_OK(ncclSend(b.get(), 16, ncclFloat32, 1, comms[0], s.get()));
  EXPECT_EQ(cudaStreamSynchronize(s.get()), cudaErrorLaunchTimeout);
  const std::string text = cudaGetErrorString(cudaErrorLaunchTimeout);
  EXPECT_TRUE(contains(text, "rank 0 (cuda:0): ncclSend #0 to rank 1 waits for the matching ncclRecv of rank 1"))
      << text;
  EXPECT_TRUE(contains(text, "TANDEM_CUDASIM_WATCHDOG_S")) << text;
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

TEST(NcclWatchdog, ACollectiveOneRankNeverCalls) {
  const int devices[3] = {2, 3, 4};
  ncclComm_t comms[3];
  ASSERT_NCCL_OK(ncclCommInitAll(comms, 3, devices));
  Stream s(2);
  Buffer b(2, 4);
  ASSERT_NCCL_OK(ncclAllReduce(b.get(), b.get(), 1, ncclInt32, ncclMax, comms[0], s.get()));
  EXPECT_EQ(cudaStreamSynchronize(s.get()), cudaErrorLaunchTimeout);
  const std::string text = cudaGetErrorString(cudaErrorLaunchTimeout);
  EXPECT_TRUE(contains(text, "ncclAllReduce #0 waits for rank 1, 2")) << text;
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

// Outside a group each send holds its stream until received: two ranks that both send first deadlock, as
// with NCCL (the receives, queued behind the sends, never start).
TEST(NcclWatchdog, BothRanksSendFirstWithoutAGroup) {
  const int devices[2] = {5, 6};
  ncclComm_t comms[2];
  ASSERT_NCCL_OK(ncclCommInitAll(comms, 2, devices));
  std::unique_ptr<Stream> streams[2];
  std::unique_ptr<Buffer> send[2], recv[2];
  for (int r = 0; r < 2; ++r) {
    streams[r] = std::make_unique<Stream>(devices[r]);
    send[r] = std::make_unique<Buffer>(devices[r], 64);
    recv[r] = std::make_unique<Buffer>(devices[r], 64);
    ASSERT_NCCL_OK(ncclSend(send[r]->get(), 16, ncclFloat32, 1 - r, comms[r], streams[r]->get()));
    ASSERT_NCCL_OK(ncclRecv(recv[r]->get(), 16, ncclFloat32, 1 - r, comms[r], streams[r]->get()));
  }
  // The first watchdog to fire faults its rank; the other rank then faults either by its own watchdog or
  // because its peer's device is lost.
  int timeouts = 0;
  for (int r = 0; r < 2; ++r) {
    const cudaError_t e = cudaStreamSynchronize(streams[r]->get());
    EXPECT_TRUE(e == cudaErrorLaunchTimeout || e == cudaErrorLaunchFailure) << cudaGetErrorName(e);
    timeouts += e == cudaErrorLaunchTimeout ? 1 : 0;
  }
  EXPECT_GE(timeouts, 1);
  EXPECT_TRUE(contains(cudaGetErrorString(cudaErrorLaunchTimeout), "waits for the matching ncclRecv"));
  for (ncclComm_t c : comms) ASSERT_NCCL_OK(ncclCommDestroy(c));
}

// ncclCommInitRank blocks until every rank has joined; the watchdog ends the wait with an error (the
// calling thread is the host's, so no device is lost).
TEST(NcclWatchdog, ARankThatNeverJoins) {
  ncclUniqueId id;
  ASSERT_NCCL_OK(ncclGetUniqueId(&id));
  ASSERT_CUDA_OK(cudaSetDevice(7));
  ncclComm_t comm = nullptr;
  const auto start = std::chrono::steady_clock::now();
  EXPECT_EQ(ncclCommInitRank(&comm, 2, id, 0), ncclInvalidUsage);
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(900));
  EXPECT_TRUE(contains(last(), "1 of 2 ranks joined")) << last();
  EXPECT_EQ(comm, nullptr);
  ASSERT_CUDA_OK(cudaDeviceSynchronize());
}

}  // namespace
