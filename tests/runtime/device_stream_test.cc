// Devices, streams and events on the CPU (and CUDA when present), and parallel_for: coverage of the range,
// grains, exception propagation, nesting, per-thread settings, and results independent of the thread count.
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <sstream>
#include <stdexcept>
#include <thread>
#include <vector>

#include "runtime/base/cuda_check.h"
#include "runtime/base/error.h"
#include "runtime/base/parallel_for.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using tandem::testing::expect_bitwise_equal;
using tandem::testing::fresh_seed;

// Sets this thread's intra-op thread count while in scope.
class IntraOpThreads {
 public:
  explicit IntraOpThreads(int n) : previous_(intra_op_threads()) { set_intra_op_threads(n); }
  ~IntraOpThreads() { set_intra_op_threads(previous_); }

 private:
  int previous_;
};

TEST(Devices, CurrentDeviceAndGuardsOnTheCpu) {
  EXPECT_EQ(current_device(), Device::cpu());
  {
    DeviceGuard g(Device::cpu());
    EXPECT_EQ(current_device(), Device::cpu());
    EXPECT_EQ(empty({2}).device(), Device::cpu());
  }
  Stream s = current_stream();
  EXPECT_EQ(s.device(), Device::cpu());
  EXPECT_EQ(s.cuda(), nullptr);
  EXPECT_EQ(s, Stream());
  EXPECT_EQ(default_stream(Device::cpu()), Stream());
  EXPECT_EQ(s.id(), 0u);
  // A created CPU stream is a tag of its own: equal to its copies only, current while guarded, per thread.
  Stream created = Stream::create(Device::cpu());
  Stream copy = created;
  EXPECT_NE(created, Stream());
  EXPECT_NE(created, Stream::create(Device::cpu()));
  EXPECT_EQ(copy, created);
  EXPECT_EQ(copy.id(), created.id());
  EXPECT_EQ(created.cuda(), nullptr);
  created.synchronize();
  Stream other_thread_saw = created;
  {
    StreamGuard sg(created);
    EXPECT_EQ(current_device(), Device::cpu());
    EXPECT_EQ(current_stream(), created);
    std::thread([&other_thread_saw] { other_thread_saw = current_stream(); }).join();
  }
  EXPECT_EQ(other_thread_saw, Stream());
  EXPECT_EQ(current_stream(), Stream());
  Device seen = Device::cuda(3);
  std::thread([&seen] { seen = current_device(); }).join();
  EXPECT_EQ(seen, Device::cpu());
  EXPECT_EQ(Device::cpu().str(), "cpu");
  std::ostringstream os;
  os << Device::cuda(1);
  EXPECT_EQ(os.str(), "cuda:1");
}

TEST(Devices, CudaGuardsAndStreamsAreThreadLocalAndNest) {
  TD_REQUIRE_GPU();
  Device gpu = Device::cuda(0);
  Stream mine = Stream::create(gpu);
  EXPECT_NE(mine.cuda(), nullptr);
  {
    DeviceGuard g(gpu);
    EXPECT_EQ(current_device(), gpu);
    EXPECT_EQ(empty({2}).device(), gpu);
    EXPECT_EQ(current_stream(gpu), default_stream(gpu));
    {
      StreamGuard sg(mine);
      EXPECT_EQ(current_stream(gpu), mine);
      Stream other_thread;
      std::thread([&] { other_thread = current_stream(gpu); }).join();
      EXPECT_EQ(other_thread, default_stream(gpu));
    }
    EXPECT_EQ(current_stream(gpu), default_stream(gpu));
  }
  EXPECT_EQ(current_device(), Device::cpu());
  EXPECT_EQ(best_device(), gpu);
}

TEST(Events, TimingOnTheCpu) {
  Event start(true), end(true);
  EXPECT_FALSE(start.recorded());
  EXPECT_TRUE(start.query());
  EXPECT_THROW(start.elapsed_ms(end), ValueError);
  start.record(Stream());
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  end.record(Stream());
  EXPECT_TRUE(end.recorded());
  EXPECT_TRUE(end.query());
  end.synchronize();
  float ms = start.elapsed_ms(end);
  EXPECT_GE(ms, 19.0f);
  EXPECT_LT(ms, 5000.0f);
  EXPECT_EQ(start.device(), Device::cpu());
  Event moved(std::move(end));
  EXPECT_TRUE(moved.recorded());
  EXPECT_NEAR(start.elapsed_ms(moved), ms, 1e-3);
  Event untimed;  // CPU events always carry the host time
  untimed.record(Stream());
  EXPECT_GE(start.elapsed_ms(untimed), ms);
  Stream().wait(untimed);  // a no-op on the CPU
}

TEST(Events, CudaTiming) {
  TD_REQUIRE_GPU();
  Stream s = Stream::create(Device::cuda(0));
  Event a(true), b(true), untimed;
  a.record(s);
  {
    StreamGuard g(s);
    Tensor x = ones({1 << 20}, Device::cuda(0));
    for (int i = 0; i < 10; ++i) x = x * 1.0001;
  }
  b.record(s);
  untimed.record(s);
  b.synchronize();
  EXPECT_TRUE(b.query());
  EXPECT_GE(a.elapsed_ms(b), 0.0f);
  EXPECT_THROW(a.elapsed_ms(untimed), ValueError);
  EXPECT_THROW(a.record(Stream()), DeviceError);
}

// A failure that a destructor can only ignore must not stay behind as the thread's last CUDA error: the next
// kernel's launch check would report it as that kernel's failure.
TEST(Errors, AnErrorIgnoredInADestructorIsNotBlamedOnTheNextKernel) {
  TD_REQUIRE_GPU();
  if (!cuda_simulated())
    GTEST_SKIP() << "destroys a stream twice, which the simulated GPU refuses cleanly and a real driver may not";
  DeviceGuard guard(Device::cuda(0));
  cudaStream_t raw = nullptr;
  ASSERT_EQ(cudaStreamCreate(&raw), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(raw), cudaSuccess);
  { Stream stale = Stream::wrap(Device::cuda(0), raw, /*owned=*/true); }  // its destroy fails
  Tensor t = ones({8}, Device::cuda(0));  // a fill kernel, checked right after its launch
  EXPECT_EQ(t.to(Device::cpu()).to_vector<float>(), std::vector<float>(8, 1.f));
}

// A failed call that TD_CUDA_CHECK reported as an exception is not reported again by the next kernel.
TEST(Errors, AnErrorThrownOnceIsNotBlamedOnTheNextKernel) {
  TD_REQUIRE_GPU();
  DeviceGuard guard(Device::cuda(0));
  EXPECT_THROW(TD_CUDA_CHECK(cudaSetDevice(cuda_device_count() + 7)), BackendError);
  Tensor t = ones({8}, Device::cuda(0));
  EXPECT_EQ(t.to(Device::cpu()).to_vector<float>(), std::vector<float>(8, 1.f));
}

TEST(ParallelFor, CoversTheRangeExactlyOnceInPiecesOfAtLeastTheGrain) {
  IntraOpThreads threads(4);
  struct Range {
    int64_t begin, end, grain;
  };
  for (Range r : {Range{0, 0, 1}, Range{5, 5, 1}, Range{0, 1, 1}, Range{0, 1000, 1}, Range{3, 1003, 7},
                  Range{0, 100000, 1000}, Range{-50, 50, 30}}) {
    std::vector<std::atomic<int>> hits(static_cast<size_t>(r.end - r.begin));
    std::atomic<int> calls{0}, short_pieces{0};
    parallel_for(r.begin, r.end, r.grain, [&](int64_t lo, int64_t hi) {
      ++calls;
      if (hi - lo < r.grain && hi != r.end) ++short_pieces;
      for (int64_t i = lo; i < hi; ++i) ++hits[static_cast<size_t>(i - r.begin)];
    });
    for (size_t i = 0; i < hits.size(); ++i) ASSERT_EQ(hits[i].load(), 1) << "index " << r.begin + i;
    EXPECT_EQ(short_pieces.load(), 0) << r.begin << ".." << r.end;
    if (r.end == r.begin) {
      EXPECT_EQ(calls.load(), 0);
    }
    EXPECT_LE(calls.load(), 4);
  }
}

TEST(ParallelFor, OneThreadRunsInlineOnTheCaller) {
  IntraOpThreads threads(1);
  std::thread::id caller = std::this_thread::get_id();
  int calls = 0;
  parallel_for(0, 100000, 1, [&](int64_t lo, int64_t hi) {
    ++calls;
    EXPECT_EQ(std::this_thread::get_id(), caller);
    EXPECT_EQ(lo, 0);
    EXPECT_EQ(hi, 100000);
  });
  EXPECT_EQ(calls, 1);
}

TEST(ParallelFor, ExceptionsReachTheCallerWithTheirType) {
  IntraOpThreads threads(4);
  EXPECT_THROW(parallel_for(0, 1000, 10,
                            [](int64_t lo, int64_t hi) {
                              if (lo <= 900 && 900 < hi) throw std::runtime_error("piece failed");
                            }),
               std::runtime_error);
  EXPECT_THROW(parallel_for(0, 1000, 10,
                            [](int64_t lo, int64_t) {
                              if (lo == 0) TD_THROW(IndexError, "first piece");
                            }),
               IndexError);
  // The pool still works afterwards.
  std::atomic<int64_t> total{0};
  parallel_for(0, 1000, 10, [&](int64_t lo, int64_t hi) { total += hi - lo; });
  EXPECT_EQ(total.load(), 1000);
}

TEST(ParallelFor, NestedCallsRunInline) {
  IntraOpThreads threads(4);
  std::atomic<int64_t> total{0};
  parallel_for(0, 8, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i) parallel_for(0, 100, 1, [&](int64_t a, int64_t b) { total += b - a; });
  });
  EXPECT_EQ(total.load(), 800);
}

TEST(ParallelFor, ThreadCountIsPerThread) {
  IntraOpThreads threads(3);
  std::thread([] { set_intra_op_threads(1); }).join();
  EXPECT_EQ(intra_op_threads(), 3);
  set_intra_op_threads(0);
  EXPECT_EQ(intra_op_threads(), 1);  // clamped
}

TEST(ParallelFor, KernelResultsDoNotDependOnTheThreadCount) {
  Generator gen(fresh_seed());
  Tensor a = randn({70, 300}, gen), b = randn({300, 90}, gen), big = randn({40000}, gen, DType::F64);
  auto run = [&] { return std::vector<Tensor>{matmul(a, b), sum(a, {0}), softmax(a, 1), exp(big), add(big, big)}; };
  std::vector<Tensor> one, four;
  {
    IntraOpThreads t(1);
    one = run();
  }
  {
    IntraOpThreads t(4);
    four = run();
  }
  for (size_t i = 0; i < one.size(); ++i) expect_bitwise_equal(one[i], four[i], "result " + std::to_string(i));
}

}  // namespace
}  // namespace tandem
