// The simulated NCCL fed the misuse real NCCL refuses, hangs on or corrupts data with: each error path gives
// its documented code and a text that names what went wrong. A fault loses its device's context for the rest
// of the process, so every test that faults one uses devices of its own (32 simulated devices, 64 MiB each).
#include <sys/wait.h>
#include <unistd.h>

#include <cstring>
#include <future>
#include <memory>
#include <thread>

#include "tests/cudasim/sim_testing.h"

namespace {

using Buffer = cudasim_testing::DeviceBuffer<char>;
using cudasim_testing::contains;
using Stream = cudasim_testing::TestStream;

// Before the simulator reads its configuration (at the first CUDA call).
const bool kConfigured = [] {
  setenv("TANDEM_CUDASIM_DEVICES", "32", 1);
  setenv("TANDEM_CUDASIM_MEMORY_MB", "64", 1);
  return true;
}();

std::string last() { return ncclGetLastError(nullptr); }

struct Pair {
  explicit Pair(int first_device) : devices{first_device, first_device + 1} {
    EXPECT_EQ(ncclCommInitAll(comms, 2, devices), ncclSuccess) << last();
    for (int r = 0; r < 2; ++r) streams[r] = std::make_unique<Stream>(devices[r]);
  }
  ~Pair() {
    for (ncclComm_t c : comms) ncclCommDestroy(c);
  }
  int devices[2];
  ncclComm_t comms[2] = {nullptr, nullptr};
  std::unique_ptr<Stream> streams[2];
};

// Each rank calls a different collective; both ranks' streams fault, and the text names both calls.
TEST(NcclErrors, MismatchedCollectivesFaultBothRanksNamingThem) {
  ASSERT_TRUE(kConfigured);
  struct Case {
    const char* what;
    bool broadcast[2];
    size_t count[2];
    ncclDataType_t type[2];
    ncclRedOp_t op[2];
    int root[2];
    const char* signature[2];
  };
  const Case cases[] = {
      {"kind",
       {false, true},
       {8, 8},
       {ncclFloat32, ncclFloat32},
       {ncclSum, ncclSum},
       {0, 0},
       {"ncclAllReduce(count 8, ncclFloat32, ncclSum)", "ncclBroadcast(count 8, ncclFloat32, root 0)"}},
      {"count",
       {false, false},
       {8, 9},
       {ncclFloat32, ncclFloat32},
       {ncclSum, ncclSum},
       {0, 0},
       {"ncclAllReduce(count 8, ncclFloat32, ncclSum)", "ncclAllReduce(count 9, ncclFloat32, ncclSum)"}},
      {"datatype",
       {false, false},
       {8, 8},
       {ncclFloat32, ncclInt32},
       {ncclSum, ncclSum},
       {0, 0},
       {"ncclAllReduce(count 8, ncclFloat32, ncclSum)", "ncclAllReduce(count 8, ncclInt32, ncclSum)"}},
      {"root",
       {true, true},
       {8, 8},
       {ncclFloat32, ncclFloat32},
       {ncclSum, ncclSum},
       {0, 1},
       {"ncclBroadcast(count 8, ncclFloat32, root 0)", "ncclBroadcast(count 8, ncclFloat32, root 1)"}},
      {"reduction op",
       {false, false},
       {8, 8},
       {ncclFloat32, ncclFloat32},
       {ncclSum, ncclMax},
       {0, 0},
       {"ncclAllReduce(count 8, ncclFloat32, ncclSum)", "ncclAllReduce(count 8, ncclFloat32, ncclMax)"}},
  };
  int device = 2;
  for (const Case& c : cases) {
    SCOPED_TRACE(std::string("a mismatch of ") + c.what);
    Pair p(device);
    device += 2;
    std::unique_ptr<Buffer> bufs[2];
    ASSERT_NCCL_OK(ncclGroupStart());
    for (int r = 0; r < 2; ++r) {
      bufs[r] = std::make_unique<Buffer>(p.devices[r], 64);
      if (c.broadcast[r])
        ASSERT_NCCL_OK(ncclBroadcast(bufs[r]->get(), bufs[r]->get(), c.count[r], c.type[r], c.root[r], p.comms[r],
                                     p.streams[r]->get()));
      else
        ASSERT_NCCL_OK(ncclAllReduce(bufs[r]->get(), bufs[r]->get(), c.count[r], c.type[r], c.op[r], p.comms[r],
                                     p.streams[r]->get()));
    }
    ASSERT_NCCL_OK(ncclGroupEnd());
    for (int r = 0; r < 2; ++r) {
      ASSERT_EQ(cudaStreamSynchronize(p.streams[r]->get()), cudaErrorLaunchFailure);
      const std::string text = cudaGetErrorString(cudaErrorLaunchFailure);
      for (int q = 0; q < 2; ++q) {
        EXPECT_TRUE(contains(text, "rank " + std::to_string(q) + " (cuda:" + std::to_string(p.devices[q]) + ")"))
            << text;
        EXPECT_TRUE(contains(text, c.signature[q])) << text;
      }
    }
  }
}

TEST(NcclErrors, MismatchedSendAndRecvFaultBothSides) {
  Pair p(12);
  Buffer src(12, 64), dst(13, 64);
  ASSERT_NCCL_OK(ncclSend(src.get(), 10, ncclFloat32, 1, p.comms[0], p.streams[0]->get()));
  ASSERT_NCCL_OK(ncclRecv(dst.get(), 12, ncclFloat32, 0, p.comms[1], p.streams[1]->get()));
  for (int r = 0; r < 2; ++r) {
    ASSERT_EQ(cudaStreamSynchronize(p.streams[r]->get()), cudaErrorLaunchFailure);
    const std::string text = cudaGetErrorString(cudaErrorLaunchFailure);
    EXPECT_TRUE(contains(text, "rank 0 (cuda:12) sends ncclSend(count 10, ncclFloat32)")) << text;
    EXPECT_TRUE(contains(text, "rank 1 (cuda:13) receives ncclRecv(count 12, ncclFloat32)")) << text;
  }
}

// NCCL's communicators are not thread-safe: a thread that uses one while another thread's group holds it gets
// ncclInvalidUsage, and so does destroying it then. The group itself goes on unharmed.
TEST(NcclErrors, TwoThreadsOnOneCommunicator) {
  Pair p(0);
  Buffer a(0, 4), b(1, 4);
  std::promise<void> held, checked;
  std::thread owner([&] {
    ASSERT_NCCL_OK(ncclGroupStart());
    ASSERT_NCCL_OK(ncclAllReduce(a.get(), a.get(), 1, ncclFloat32, ncclSum, p.comms[0], p.streams[0]->get()));
    held.set_value();
    checked.get_future().wait();
    ASSERT_NCCL_OK(ncclGroupEnd());
  });
  held.get_future().wait();
  EXPECT_EQ(ncclAllReduce(a.get(), a.get(), 1, ncclFloat32, ncclSum, p.comms[0], p.streams[0]->get()),
            ncclInvalidUsage);
  EXPECT_TRUE(contains(last(), "rank 0 of 2, cuda:0)")) << last();
  EXPECT_TRUE(contains(last(), "another host thread")) << last();
  EXPECT_EQ(ncclCommDestroy(p.comms[0]), ncclInvalidUsage);
  EXPECT_TRUE(contains(last(), "in use by a host thread")) << last();
  checked.set_value();
  owner.join();
  ASSERT_NCCL_OK(ncclAllReduce(b.get(), b.get(), 1, ncclFloat32, ncclSum, p.comms[1], p.streams[1]->get()));
  ASSERT_CUDA_OK(cudaStreamSynchronize(p.streams[0]->get()));
  ASSERT_CUDA_OK(cudaStreamSynchronize(p.streams[1]->get()));
}

TEST(NcclErrors, StreamOfAnotherDevice) {
  Pair p(0);
  Buffer a(0, 4);
  EXPECT_EQ(ncclAllReduce(a.get(), a.get(), 1, ncclFloat32, ncclSum, p.comms[0], p.streams[1]->get()),
            ncclInvalidUsage);
  EXPECT_TRUE(contains(last(), "the stream belongs to cuda:1")) << last();
}

TEST(NcclErrors, InvalidArguments) {
  Pair p(0);
  Buffer a(0, 64);
  cudaStream_t s = p.streams[0]->get();
  ncclComm_t c = p.comms[0];
  auto expect_invalid = [](ncclResult_t r, const std::string& part) {
    EXPECT_EQ(r, ncclInvalidArgument) << part;
    EXPECT_TRUE(contains(last(), part)) << last();
  };
  expect_invalid(ncclAllReduce(a.get(), a.get(), 1, ncclNumTypes, ncclSum, c, s), "unknown datatype 12");
  expect_invalid(ncclAllReduce(a.get(), a.get(), 1, ncclFloat32, ncclNumOps, c, s), "unknown reduction op 5");
  expect_invalid(ncclAllReduce(a.get(), a.get(), 1, ncclFloat8e4m3, ncclSum, c, s), "no arithmetic for ncclFloat8e4m3");
  expect_invalid(ncclBroadcast(a.get(), a.get(), 1, ncclFloat32, 2, c, s), "root 2 is not a rank");
  expect_invalid(ncclSend(a.get(), 1, ncclFloat32, -1, c, s), "peer -1 is not a rank");
  expect_invalid(ncclRecv(nullptr, 1, ncclFloat32, 1, c, s), "recvbuff is NULL");
  expect_invalid(ncclAllGather(a.get(), a.get(), 1, ncclFloat32, nullptr, s), "comm is NULL");
  ncclComm_t child = nullptr;
  expect_invalid(ncclCommSplit(c, -5, 0, &child, nullptr), "color -5");
  ncclConfig_t garbage;
  std::memset(&garbage, 0, sizeof(garbage));
  expect_invalid(ncclCommSplit(c, 0, 0, &child, &garbage), "NCCL_CONFIG_INITIALIZER");
  const int bad_device = 99;
  expect_invalid(ncclCommInitAll(&child, 1, &bad_device), "device 99");
  ncclUniqueId id;
  ASSERT_NCCL_OK(ncclGetUniqueId(&id));
  expect_invalid(ncclCommInitRank(&child, 2, id, 2), "rank 2 is not in [0, 2)");

  ncclComm_t gone = nullptr;
  const int device = 0;
  ASSERT_NCCL_OK(ncclCommInitAll(&gone, 1, &device));
  ASSERT_NCCL_OK(ncclCommDestroy(gone));
  expect_invalid(ncclAllReduce(a.get(), a.get(), 1, ncclFloat32, ncclSum, gone, s), "not a live communicator");

  ncclConfig_t nonblocking = NCCL_CONFIG_INITIALIZER;
  nonblocking.blocking = 0;
  EXPECT_EQ(ncclCommSplit(c, 0, 0, &child, &nonblocking), ncclInvalidUsage);
  EXPECT_TRUE(contains(last(), "nonblocking communicators")) << last();
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_TRUE(contains(last(), "without a matching ncclGroupStart")) << last();
  const int same[2] = {0, 0};
  ncclComm_t two[2];
  EXPECT_EQ(ncclCommInitAll(two, 2, same), ncclInvalidUsage);
  EXPECT_TRUE(contains(last(), "ranks 0 and 1 are both on cuda:0")) << last();
}

// A call that fails inside a group makes ncclGroupEnd fail too, and none of the group's operations run.
TEST(NcclErrors, AFailedCallAbandonsItsGroup) {
  ncclComm_t comm = nullptr;
  const int device = 0;
  ASSERT_NCCL_OK(ncclCommInitAll(&comm, 1, &device));
  Stream s(0);
  Buffer a(0, 4), b(0, 4);
  const float x = 3.0f, zero = 0.0f;
  a.upload(&x);
  b.upload(&zero);
  ASSERT_NCCL_OK(ncclGroupStart());
  ASSERT_NCCL_OK(ncclAllReduce(a.get(), b.get(), 1, ncclFloat32, ncclSum, comm, s.get()));
  EXPECT_EQ(ncclAllReduce(a.get(), b.get(), 1, ncclFloat32, static_cast<ncclRedOp_t>(9), comm, s.get()),
            ncclInvalidArgument);
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidArgument);
  ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
  float got;
  std::memcpy(&got, b.download().data(), 4);
  EXPECT_EQ(got, 0.0f);
  ASSERT_NCCL_OK(ncclCommDestroy(comm));
}

// NCCL's one exception to grouping: creating communicators cannot be grouped with operations.
TEST(NcclErrors, CreationsAndOperationsInOneGroup) {
  ncclComm_t comm = nullptr, created = nullptr;
  const int device = 1;
  ASSERT_NCCL_OK(ncclCommInitAll(&comm, 1, &device));
  Stream s(1);
  Buffer a(1, 4);
  ncclUniqueId id;
  ASSERT_NCCL_OK(ncclGetUniqueId(&id));
  ASSERT_CUDA_OK(cudaSetDevice(1));
  ASSERT_NCCL_OK(ncclGroupStart());
  ASSERT_NCCL_OK(ncclCommInitRank(&created, 1, id, 0));
  ASSERT_NCCL_OK(ncclAllReduce(a.get(), a.get(), 1, ncclFloat32, ncclSum, comm, s.get()));
  EXPECT_EQ(ncclGroupEnd(), ncclInvalidUsage);
  EXPECT_TRUE(contains(last(), "cannot also hold operations")) << last();
  EXPECT_EQ(cudaStreamQuery(s.get()), cudaSuccess) << "the operation was queued";
  ASSERT_NCCL_OK(ncclCommDestroy(created));
  ASSERT_NCCL_OK(ncclCommDestroy(comm));
}

// Memory of another device, without peer access, faults on the rank's own stream when the operation runs.
TEST(NcclErrors, BufferOfAnotherDeviceFaultsWithIllegalAddress) {
  ncclComm_t comm = nullptr;
  const int device = 14;
  ASSERT_NCCL_OK(ncclCommInitAll(&comm, 1, &device));
  Stream s(14);
  Buffer mine(14, 16), foreign(15, 16);
  ASSERT_NCCL_OK(ncclAllReduce(mine.get(), foreign.get(), 4, ncclFloat32, ncclSum, comm, s.get()));
  EXPECT_EQ(cudaStreamSynchronize(s.get()), cudaErrorIllegalAddress);
  const std::string text = cudaGetErrorString(cudaErrorIllegalAddress);
  EXPECT_TRUE(contains(text, "ncclAllReduce recvbuff")) << text;
  EXPECT_TRUE(contains(text, "cudaMalloc memory of cuda:15")) << text;
  ASSERT_NCCL_OK(ncclCommDestroy(comm));
}

// When a rank's device faults, its peers stop waiting for it and fault too, naming it.
TEST(NcclErrors, APeerWhoseDeviceFaulted) {
  Pair p(16);
  Buffer ok(17, 16);
  float host[4] = {};
  ASSERT_NCCL_OK(ncclGroupStart());
  ASSERT_NCCL_OK(ncclAllReduce(host, host, 4, ncclFloat32, ncclSum, p.comms[0], p.streams[0]->get()));
  ASSERT_NCCL_OK(ncclAllReduce(ok.get(), ok.get(), 4, ncclFloat32, ncclSum, p.comms[1], p.streams[1]->get()));
  ASSERT_NCCL_OK(ncclGroupEnd());
  EXPECT_EQ(cudaStreamSynchronize(p.streams[0]->get()), cudaErrorIllegalAddress);
  EXPECT_TRUE(contains(cudaGetErrorString(cudaErrorIllegalAddress), "is not device memory"));
  EXPECT_EQ(cudaStreamSynchronize(p.streams[1]->get()), cudaErrorLaunchFailure);
  const std::string text = cudaGetErrorString(cudaErrorLaunchFailure);
  EXPECT_TRUE(contains(text, "rank 0 (cuda:16) lost its device's context (cudaErrorIllegalAddress)")) << text;
}

// Each communicator holds device memory; a device too full for it makes the creation fail as a failed
// cudaMalloc would inside NCCL.
TEST(NcclErrors, CommunicatorsHoldDeviceMemory) {
  const int device = 18;
  ASSERT_CUDA_OK(cudaSetDevice(device));
  size_t free_before = 0, free_with = 0, free_after = 0, total = 0;
  ASSERT_CUDA_OK(cudaMemGetInfo(&free_before, &total));
  ncclComm_t comm = nullptr;
  ASSERT_NCCL_OK(ncclCommInitAll(&comm, 1, &device));
  ASSERT_CUDA_OK(cudaMemGetInfo(&free_with, &total));
  ASSERT_NCCL_OK(ncclCommDestroy(comm));
  ASSERT_CUDA_OK(cudaMemGetInfo(&free_after, &total));
  EXPECT_EQ(free_before - free_with, size_t{4} << 20);
  EXPECT_EQ(free_after, free_before);

  void* filler = nullptr;
  ASSERT_CUDA_OK(cudaMalloc(&filler, free_before - (size_t{2} << 20)));
  EXPECT_EQ(ncclCommInitAll(&comm, 1, &device), ncclUnhandledCudaError);
  EXPECT_TRUE(contains(last(), "cuda:18: the device is full")) << last();
  ASSERT_CUDA_OK(cudaFree(filler));
  ASSERT_NCCL_OK(ncclCommInitAll(&comm, 1, &device));
  ASSERT_NCCL_OK(ncclCommDestroy(comm));
}

// Under mpirun each rank is a process of its own: the simulator cannot join them, and says so.
TEST(NcclErrors, AnIdFromAnotherProcess) {
  int fds[2];
  ASSERT_EQ(pipe(fds), 0);
  const pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    ncclUniqueId made;
    const bool ok = ncclGetUniqueId(&made) == ncclSuccess && write(fds[1], &made, sizeof(made)) == sizeof(made);
    _exit(ok ? 0 : 1);
  }
  ncclUniqueId foreign;
  ASSERT_EQ(read(fds[0], &foreign, sizeof(foreign)), static_cast<ssize_t>(sizeof(foreign)));
  int status = 0;
  waitpid(child, &status, 0);
  close(fds[0]);
  close(fds[1]);
  ASSERT_CUDA_OK(cudaSetDevice(0));
  ncclComm_t comm = nullptr;
  EXPECT_EQ(ncclCommInitRank(&comm, 2, foreign, 0), ncclInvalidUsage);
  EXPECT_TRUE(contains(last(), "made by another process (pid " + std::to_string(child) + ")")) << last();
  EXPECT_TRUE(contains(last(), "joins ranks of one process only")) << last();
  ncclUniqueId zero;
  std::memset(&zero, 0, sizeof(zero));
  EXPECT_EQ(ncclCommInitRank(&comm, 2, zero, 0), ncclInvalidUsage);
  EXPECT_TRUE(contains(last(), "not made by ncclGetUniqueId")) << last();
}

// Ranks that disagree while joining: each gets the error (none waits forever).
TEST(NcclErrors, InitRanksThatDisagree) {
  struct Rank {
    int device, nranks, rank;
  };
  auto join = [](const std::vector<Rank>& ranks, ncclResult_t expected, const std::string& part) {
    ncclUniqueId id;
    ASSERT_NCCL_OK(ncclGetUniqueId(&id));
    std::vector<std::thread> threads;
    for (const Rank& k : ranks) {
      threads.emplace_back([&, k] {
        ASSERT_CUDA_OK(cudaSetDevice(k.device));
        ncclComm_t comm = nullptr;
        EXPECT_EQ(ncclCommInitRank(&comm, k.nranks, id, k.rank), expected) << part;
        EXPECT_TRUE(contains(last(), part)) << last();
      });
    }
    for (std::thread& t : threads) t.join();
  };
  join({{0, 2, 0}, {1, 3, 1}}, ncclInvalidArgument, "nranks");
  join({{0, 2, 0}, {1, 2, 0}}, ncclInvalidArgument, "rank 0 joined twice");
  join({{1, 2, 0}, {1, 2, 1}}, ncclInvalidUsage, "ranks 0 and 1 are both on cuda:1");
}

}  // namespace
