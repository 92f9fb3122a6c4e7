// The sanitizer builds of the simulated GPU catch what a GPU's compute-sanitizer would: each test runs a
// deliberately wrong kernel in a child process and asserts the report. AddressSanitizer: reads past an
// allocation; UndefinedBehaviorSanitizer: a __shared__ index out of bounds (ASan does not see thread_local
// arrays) and a misaligned vector load (x86 would not fault, a GPU does); ThreadSanitizer: a missing
// __syncthreads and two streams touching one buffer without an event, and nothing on correct work that the
// engine's own bookkeeping touches. Each needs its build
// (--config=cudasim-asan, run by tools/tandem test; --config=cudasim-tsan, run by tools/tandem tsan).
#include <gtest/gtest.h>

#include <cstdlib>
#include <vector>

#include "kernels/cuda/kernel_launch.cuh"
#include "tests/cudasim/sim_testing.h"
#include "tools/cudasim/counters_abi.h"

namespace {

using tandem::cuda::launch_kernel;
using namespace cudasim_testing;

#if defined(__SANITIZE_ADDRESS__)
constexpr bool kAsan = true;
#else
constexpr bool kAsan = false;
#endif

__global__ void copy_n_kernel(const float* in, float* out, int n) {
  const int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) out[i] = in[i];
}

__global__ void shared_overrun_kernel(const float* in, float* out) {
  __shared__ float tile[32];
  tile[threadIdx.x + 1] = in[threadIdx.x];  // thread 31 writes tile[32]
  out[threadIdx.x] = tile[threadIdx.x];
}

// 16 bytes moved by one load, as the kernels' vector loads do (kernels/cuda/device_utils.cuh).
struct alignas(16) Vec4 {
  float v[4];
};

__global__ void misaligned_load_kernel(const float* in, float* out) {
  // A 16-byte vector load from an address 4 bytes past a 16-byte boundary.
  Vec4 v = *reinterpret_cast<const Vec4*>(in + 1);
  out[threadIdx.x] = v.v[0];
}

// Runs `kernel` over 32 floats read from a buffer of `in_n` floats, and waits for it.
template <typename K, typename... A>
void run_once(K kernel, int threads, int in_n, A... extra) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceBuffer<float> in(0, std::vector<float>(static_cast<size_t>(in_n), 1.f));
  DeviceBuffer<float> out(0, std::vector<float>(64, 0.f));
  launch_kernel(tandem::cuda::make_kernel_ref(kernel, "kernel", __FILE__, __LINE__), 1, threads, 0, in.stream(),
                in.get(), out.get(), extra...);
  cudaStreamSynchronize(in.stream());
}

class Sanitizers : public ::testing::Test {
 protected:
  void SetUp() override { ::testing::GTEST_FLAG(death_test_style) = "threadsafe"; }
};

TEST_F(Sanitizers, AddressSanitizerReportsAReadPastAnAllocation) {
  if (!kAsan) GTEST_SKIP() << "needs the AddressSanitizer build (--config=cudasim-asan, run by tools/tandem test)";
  EXPECT_DEATH(run_once(copy_n_kernel, 64, 32, 33), "AddressSanitizer");
}

TEST_F(Sanitizers, BoundsCheckReportsASharedArrayIndexOutOfRange) {
  if (!kAsan) GTEST_SKIP() << "needs the UBSan build (--config=cudasim-asan, run by tools/tandem test)";
  EXPECT_DEATH(run_once(shared_overrun_kernel, 32, 32), "index 32 out of bounds");
}

TEST_F(Sanitizers, AlignmentCheckReportsAMisalignedVectorLoad) {
  if (!kAsan) GTEST_SKIP() << "needs the UBSan build (--config=cudasim-asan, run by tools/tandem test)";
  EXPECT_DEATH(run_once(misaligned_load_kernel, 1, 32), "misaligned address");
}

TEST_F(Sanitizers, CorrectKernelsAreNotReported) {
  // The same kernels used correctly run clean in every build (a sanitizer that reports them would be useless).
  run_once(copy_n_kernel, 64, 64, 32);
  DeviceBuffer<float> in(0, std::vector<float>(8, 2.f)), out(0, std::vector<float>(4, 0.f));
  launch_kernel(TD_KERNEL(misaligned_load_kernel), 1, 1, 0, in.stream(), in.get() + 3, out.get());  // 16-byte aligned
  EXPECT_EQ(out.download()[0], 2.f);
}

// The ThreadSanitizer cases exist only in its build (tools/tandem tsan): elsewhere they could only skip.
#if defined(__SANITIZE_THREAD__)
__global__ void missing_barrier_kernel(const float* in, float* out) {
  __shared__ float tile[64];
  tile[threadIdx.x] = in[threadIdx.x];
  // A __syncthreads belongs here: thread t reads what thread t + 1 wrote.
  out[threadIdx.x] = tile[(threadIdx.x + 1) % 64];
}

TEST_F(Sanitizers, ThreadSanitizerReportsAMissingBarrier) {
  EXPECT_DEATH(run_once(missing_barrier_kernel, 64, 64), "data race");
}

// b is written on b.stream() and read on `other` with nothing ordering the two.
void race_two_streams() {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceBuffer<float> a(0, std::vector<float>(64, 1.f)), b(0, std::vector<float>(64, 0.f));
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  launch_kernel(TD_KERNEL(copy_n_kernel), 1, 64, 0, b.stream(), a.get(), b.get(), 64);
  launch_kernel(TD_KERNEL(copy_n_kernel), 1, 64, 0, other, b.get(), a.get(), 64);
  cudaDeviceSynchronize();
}

TEST_F(Sanitizers, ThreadSanitizerReportsTwoStreamsWithoutAnEvent) { EXPECT_DEATH(race_two_streams(), "data race"); }

// Counts flops from every thread of a block, as the kernels' math does (kernels/cuda/math.cuh).
__global__ void counted_kernel(const float* in, float* out) {
  ::cudasim::simt::count_flops(2);
  out[threadIdx.x] = in[threadIdx.x] * 2.f;
}

// Correct work that only the engine's bookkeeping could make ThreadSanitizer report: a counted launch (each
// thread's fiber sets the counter's per-host-thread state and adds its flops) and a copy from pageable memory
// (its staged bytes released by the stream's thread and by the caller); exits 0 when nothing was reported.
void engine_bookkeeping() {
  tandem_cudasim_counting(TANDEM_CUDASIM_COUNTING_ON);
  run_once(counted_kernel, 64, 64);
  tandem_cudasim_counting(TANDEM_CUDASIM_COUNTING_OFF);
  DeviceBuffer<float> out(0, std::vector<float>(64, 0.f));
  for (int i = 0; i < 16; ++i) {
    std::vector<float> pageable(64, static_cast<float>(i));
    if (cudaMemcpyAsync(out.get(), pageable.data(), 64 * sizeof(float), cudaMemcpyHostToDevice, out.stream()) !=
        cudaSuccess)
      std::exit(2);
  }
  std::exit(out.download() == std::vector<float>(64, 15.f) ? 0 : 3);
}

TEST_F(Sanitizers, ThreadSanitizerDoesNotReportTheEnginesBookkeeping) {
  EXPECT_EXIT(engine_bookkeeping(), ::testing::ExitedWithCode(0), "");
}
#endif  // __SANITIZE_THREAD__

}  // namespace
