// Tests of worker specs and run_on_workers on CPU workers (GPU workers: gpu_comm_test.cc).
#include <gtest/gtest.h>

#include <atomic>
#include <mutex>
#include <set>
#include <stdexcept>
#include <thread>

#include "parallel/worker.h"
#include "runtime/base/error.h"
#include "runtime/base/parallel_for.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace {

// EXPECTs that make_workers(spec) throws E with `part` in its message.
template <typename E>
void expect_spec_error(const std::string& spec, const std::string& part) {
  SCOPED_TRACE("spec '" + spec + "'");
  tandem::testing::expect_error<E>([&] { make_workers(spec); }, part);
}

TEST(WorkerSpec, CpuThreads) {
  std::vector<Worker> w = make_workers("cpu:4");
  ASSERT_EQ(w.size(), 4u);
  for (int i = 0; i < 4; ++i) {
    EXPECT_EQ(w[i].rank, i);
    EXPECT_EQ(w[i].kind, WorkerKind::CpuThread);
    EXPECT_TRUE(w[i].device.is_cpu());
    EXPECT_EQ(w[i].name(), "cpu#" + std::to_string(i));
    ASSERT_NE(w[i].memory, nullptr);
    EXPECT_EQ(w[i].memory->name(), w[i].name());
    EXPECT_TRUE(w[i].compute.device().is_cpu());
    EXPECT_TRUE(w[i].comm.device().is_cpu());
  }
  EXPECT_NE(w[0].memory, w[1].memory);
}

TEST(WorkerSpec, ListsNumberRanksInOrder) {
  std::vector<Worker> w = make_workers(" cpu:2 , cpu:1");
  ASSERT_EQ(w.size(), 3u);
  EXPECT_EQ(w[2].rank, 2);
  EXPECT_EQ(w[2].name(), "cpu#2");
  EXPECT_EQ(make_workers("cpu").size(), 1u);
}

TEST(WorkerSpec, BestPicksTheDevicePresent) {
  std::vector<Worker> w = make_workers("best:3");
  ASSERT_EQ(w.size(), 3u);
  for (const Worker& x : w) {
    if (cuda_available()) {
      EXPECT_EQ(x.kind, WorkerKind::CudaPartition);
      EXPECT_EQ(x.device, Device::cuda(0));
      EXPECT_EQ(x.partitions, 3);
    } else {
      EXPECT_EQ(x.kind, WorkerKind::CpuThread);
    }
  }
}

TEST(WorkerSpec, BadSpecsSayWhatIsWrong) {
  expect_spec_error<ValueError>("cpu:0", "worker spec 'cpu:0': CPU threads '0' is not an integer in [1, 4096]");
  expect_spec_error<ValueError>("cpu:", "CPU threads '' is not an integer in [1, 4096]");
  expect_spec_error<ValueError>("cpu:-2", "CPU threads '-2' is not an integer in [1, 4096]");
  expect_spec_error<ValueError>("cpu:99999", "CPU threads '99999' is not an integer in [1, 4096]");
  expect_spec_error<ValueError>("cpu:+4", "CPU threads '+4' is not an integer");
  expect_spec_error<ValueError>("cpu:4.0", "CPU threads '4.0' is not an integer");
  expect_spec_error<ValueError>("cpu:99999999999999999999", "CPU threads '99999999999999999999' is not an integer");
  expect_spec_error<ValueError>("cuda:x", "GPU index 'x' is not an integer in [0, 1023]");
  expect_spec_error<ValueError>("cuda:", "GPU index '' is not an integer");
  expect_spec_error<ValueError>("cuda:0-1x", "GPU index '1x' is not an integer");
  expect_spec_error<ValueError>("gpu:1", "cannot parse 'gpu:1' (expected cpu:N, cuda:I");
  expect_spec_error<ValueError>("cuda:0/0", "partitions '0' is not an integer in [1, 1024]");
  expect_spec_error<ValueError>("cuda:0/x", "partitions 'x'");
  expect_spec_error<ValueError>("cuda:3-1", "empty GPU range");
  expect_spec_error<ValueError>("", "empty worker spec");
  expect_spec_error<ValueError>("cpu:2,", "empty item 2");
  expect_spec_error<ValueError>("cpu:2, ,cpu:1", "empty item 2");
  expect_spec_error<ValueError>("cuda:0,cuda:0-1", "GPU 0 more than once");
  expect_spec_error<ValueError>("cpu:2,cuda:0", "mixes CPU and CUDA");
  expect_spec_error<ValueError>("best:0", "workers '0' is not an integer in [1, 1024]");
}

// One process of a multi-process run (mpirun) uses one worker of the spec: building it must not create the
// others' streams (on GPUs, a context and streams on every GPU of the spec in every process).
TEST(WorkerSpec, OneWorkerIsBuiltAlone) {
  EXPECT_EQ(count_workers("cpu:4"), 4);
  EXPECT_EQ(count_workers(" cpu:2 , cpu:3"), 5);
  const uint64_t before = Stream::create(Device::cpu()).id();
  Worker w = make_worker(" cpu:2 , cpu:3", 3);
  const uint64_t after = Stream::create(Device::cpu()).id();
  EXPECT_EQ(after - before - 1, 2u) << "streams created for one worker (its compute and comm streams)";
  EXPECT_EQ(w.rank, 3);
  EXPECT_EQ(w.kind, WorkerKind::CpuThread);
  EXPECT_EQ(w.name(), "cpu#3");
  ASSERT_NE(w.memory, nullptr);
  EXPECT_EQ(w.memory->name(), "cpu#3");
  EXPECT_TRUE(w.compute.device().is_cpu());
  EXPECT_TRUE(w.compute != w.comm);
  for (int bad : {-1, 5}) {
    try {
      make_worker("cpu:2,cpu:3", bad);
      ADD_FAILURE() << "rank " << bad << " was accepted";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("5 workers"), std::string::npos) << e.what();
    }
  }
  // count_workers checks the spec as make_workers does.
  expect_spec_error<ValueError>("cpu:0", "CPU threads '0' is not an integer in [1, 4096]");
  try {
    count_workers("cpu:2,cuda:0");
    ADD_FAILURE() << "a mixed spec was counted";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("mixes CPU and CUDA"), std::string::npos) << e.what();
  }
}

TEST(WorkerSpec, MissingGpuIsADeviceError) {
  // Without a GPU every CUDA spec names a missing device; with one, an index past the last GPU does.
  const int n = cuda_device_count();
  const std::string missing = "cuda:" + std::to_string(n);
  expect_spec_error<DeviceError>(missing, "cuda:" + std::to_string(n));
  expect_spec_error<DeviceError>(missing + "/4", "cuda:" + std::to_string(n));
  if (n == 0) expect_spec_error<DeviceError>("cuda:0-3", "no CUDA GPU");
}

TEST(RunOnWorkers, SetsDeviceStreamScopeAndThreads) {
  std::vector<Worker> w = make_workers("cpu:3");
  std::mutex mu;
  std::set<std::thread::id> threads;
  std::atomic<int> ran{0};
  run_on_workers(w, [&](Worker& me) {
    EXPECT_EQ(current_device(), me.device);
    EXPECT_TRUE(current_stream() == me.compute);
    EXPECT_EQ(intra_op_threads(), 1);
    ASSERT_EQ(current_memory_scopes().size(), 1u);
    EXPECT_EQ(current_memory_scopes()[0], me.memory);
    Tensor t = empty({(me.rank + 1) * 1000}, DType::F32);  // charged to this worker only
    {
      std::lock_guard<std::mutex> lock(mu);
      threads.insert(std::this_thread::get_id());
    }
    ++ran;
  });
  EXPECT_EQ(ran.load(), 3);
  EXPECT_EQ(threads.size(), 3u);
  EXPECT_EQ(threads.count(std::this_thread::get_id()), 0u);
  for (const Worker& x : w) {
    MemoryCounters c = x.memory->counters();
    EXPECT_EQ(c.total_peak, (x.rank + 1) * 4000) << x.name();
    EXPECT_EQ(c.total_current, 0) << x.name();
  }
  EXPECT_TRUE(current_memory_scopes().empty());
}

TEST(RunOnWorkers, RethrowsTheFirstFailureByRank) {
  std::vector<Worker> w = make_workers("cpu:4");
  std::atomic<int> finished{0};
  try {
    run_on_workers(w, [&](Worker& me) {
      if (me.rank == 3) TD_THROW(IndexError, "worker three");
      if (me.rank == 1) {
        std::this_thread::sleep_for(std::chrono::milliseconds(20));  // fails after rank 3 did
        TD_THROW(ValueError, "worker one");
      }
      ++finished;
    });
    ADD_FAILURE() << "no exception";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("worker one"), std::string::npos);
  }
  EXPECT_EQ(finished.load(), 2);  // the others ran to the end
}

TEST(RunOnWorkers, PeerFailureIsVisibleToTheOthers) {
  EXPECT_FALSE(peer_worker_failed());
  std::vector<Worker> w = make_workers("cpu:2");
  std::atomic<bool> saw{false};
  EXPECT_THROW(run_on_workers(w,
                              [&](Worker& me) {
                                if (me.rank == 0) throw std::runtime_error("boom");
                                auto deadline = std::chrono::steady_clock::now() + std::chrono::seconds(10);
                                while (!peer_worker_failed() && std::chrono::steady_clock::now() < deadline)
                                  std::this_thread::yield();
                                saw = peer_worker_failed();
                              }),
               std::runtime_error);
  EXPECT_TRUE(saw.load());
}

}  // namespace
}  // namespace parallel
}  // namespace tandem
