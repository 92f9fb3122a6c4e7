// The simulated GPU's kernel engine: warp shuffles against the CUDA Programming Guide's definitions, barriers
// and shared memory in every thread order, and the misuses a GPU refuses (each reported with kernel, file and
// line), launch configurations a device rejects, and green contexts keeping kernels on their SMs.
#include <cuda.h>
#include <cudaTypedefs.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/kernel_launch.cuh"
#include "tests/cudasim/sim_testing.h"

namespace {

using tandem::cuda::launch_kernel;
using tandem::cuda::make_kernel_ref;
using namespace cudasim_testing;

enum Shfl { kIdx, kUp, kDown, kXor };

template <typename T>
__global__ void shuffle_kernel(int kind, unsigned mask, int arg, int width, const T* in, T* out) {
  const int t = blockIdx.x * blockDim.x + threadIdx.x;
  const int lane = threadIdx.x % 32;
  if ((mask >> lane & 1u) == 0) return;  // only the lanes named by the mask take part
  T v = in[t];
  switch (kind) {
    case kIdx: v = __shfl_sync(mask, v, arg, width); break;
    case kUp: v = __shfl_up_sync(mask, v, static_cast<unsigned>(arg), width); break;
    case kDown: v = __shfl_down_sync(mask, v, static_cast<unsigned>(arg), width); break;
    default: v = __shfl_xor_sync(mask, v, arg, width); break;
  }
  out[t] = v;
}

// What lane `lane` receives, from the CUDA Programming Guide's description of each shuffle: lanes are split
// into segments of `width`; __shfl_sync reads lane srcLane modulo width of its own segment; up and down read
// lane -/+ delta and keep their own value when that leaves the segment; xor reads lane ^ laneMask and keeps its
// own value when that lies in a later segment (earlier segments may be read).
int source_lane(int kind, int lane, int arg, int width) {
  const int first = lane / width * width;
  switch (kind) {
    case kIdx: return first + ((arg % width) + width) % width;
    case kUp: return lane - first >= arg ? lane - arg : lane;
    case kDown: return lane - first + arg < width ? lane + arg : lane;
    default: {
      const int src = lane ^ arg;
      return src >= first + width ? lane : src;
    }
  }
}

template <typename T>
void check_shuffles(int device) {
  const int n = 64;  // two warps
  std::mt19937 rng(fresh_seed());
  std::vector<T> in(n);
  for (auto& v : in) v = static_cast<T>(rng() % 100000) / static_cast<T>(7);
  DeviceBuffer<T> d_in(device, in), d_out(device, std::vector<T>(n, T(-1)));
  for (int kind : {kIdx, kUp, kDown, kXor}) {
    for (int width : {1, 2, 4, 8, 16, 32}) {
      for (int arg : {0, 1, 3, 5, 16, 31, 37, -1}) {
        if (kind != kIdx && arg < 0) continue;
        SCOPED_TRACE("kind " + std::to_string(kind) + " width " + std::to_string(width) + " arg " +
                     std::to_string(arg));
        launch_kernel(TD_KERNEL(shuffle_kernel<T>), 2, 32, 0, d_in.stream(), kind, 0xffffffffu, arg, width, d_in.get(),
                      d_out.get());
        ASSERT_EQ(cudaGetLastError(), cudaSuccess);
        std::vector<T> out = d_out.download();
        for (int t = 0; t < n; ++t) {
          const int lane = t % 32, warp = t / 32;
          ASSERT_EQ(out[t], in[warp * 32 + source_lane(kind, lane, arg, width)]) << "thread " << t;
        }
      }
    }
  }
}

TEST(SimtShuffle, MatchesTheProgrammingGuideForEveryWidthAndOffset) {
  check_shuffles<float>(0);
  check_shuffles<double>(0);
  check_shuffles<long long>(0);
}

TEST(SimtShuffle, HalfWarpMasksExchangeWithinTheirHalf) {
  // Lanes 0-15 shuffle among themselves with width 16 while lanes 16-31 do not take part.
  const int n = 32;
  std::vector<int> in(n);
  for (int i = 0; i < n; ++i) in[i] = 100 + i;
  DeviceBuffer<int> d_in(0, in), d_out(0, std::vector<int>(n, -1));
  launch_kernel(TD_KERNEL(shuffle_kernel<int>), 1, 32, 0, d_in.stream(), int{kXor}, 0x0000ffffu, 1, 16, d_in.get(),
                d_out.get());
  std::vector<int> out = d_out.download();
  for (int t = 0; t < 16; ++t) EXPECT_EQ(out[t], in[t ^ 1]);
  for (int t = 16; t < 32; ++t) EXPECT_EQ(out[t], -1) << "lane " << t << " is not in the mask";
}

// A block sum through shared memory; with `barrier` false it omits the __syncthreads that makes it correct.
__global__ void block_sum_kernel(const float* in, float* out, bool barrier) {
  __shared__ float partial[256];
  const int t = threadIdx.x;
  partial[t] = in[blockIdx.x * blockDim.x + t];
  if (barrier) __syncthreads();
  if (t == 0) {
    float s = 0;
    for (int i = 0; i < static_cast<int>(blockDim.x); ++i) s += partial[i];
    out[blockIdx.x] = s;
  }
}

TEST(SimtBarrier, SharedMemoryReductionIsCorrectInEveryThreadOrder) {
  const int blocks = 5, threads = 256;
  std::vector<float> in(blocks * threads);
  std::mt19937 rng(fresh_seed());
  for (auto& v : in) v = static_cast<float>(rng() % 1000);
  std::vector<float> expected(blocks, 0.f);
  for (int b = 0; b < blocks; ++b)
    for (int t = 0; t < threads; ++t) expected[b] += in[b * threads + t];
  DeviceBuffer<float> d_in(0, in), d_out(0, std::vector<float>(blocks, 0.f));
  for (int order : {0, 1, 2}) {
    ThreadOrderGuard guard(order);
    launch_kernel(TD_KERNEL(block_sum_kernel), blocks, threads, 0, d_in.stream(), d_in.get(), d_out.get(), true);
    EXPECT_EQ(d_out.download(), expected) << "order " << order;
  }
}

TEST(SimtBarrier, AMissingBarrierShowsAsOrderDependentResults) {
#if defined(__SANITIZE_THREAD__)
  GTEST_SKIP() << "ThreadSanitizer stops at this race (sanitizer_test checks that it reports it)";
#endif
  // Thread 0 reads what the others wrote: without the barrier it sees their values only when it runs last.
  const int threads = 64;
  std::vector<float> in(threads, 1.f);
  DeviceBuffer<float> d_in(0, in), d_out(0, std::vector<float>(1, 0.f));
  std::vector<float> results;
  for (int order : {0, 1}) {
    ThreadOrderGuard guard(order);
    launch_kernel(TD_KERNEL(block_sum_kernel), 1, threads, 0, d_in.stream(), d_in.get(), d_out.get(), false);
    results.push_back(d_out.download()[0]);
  }
  EXPECT_NE(results[0], results[1]) << "forward and reverse orders must disagree on a racy kernel";
  EXPECT_EQ(results[1], static_cast<float>(threads)) << "in reverse order thread 0 runs last and sees every value";
}

__global__ void divergent_barrier_kernel(float* out) {
  if (threadIdx.x < 32) {
    __syncthreads();
  } else {
    __syncthreads();
  }
  out[threadIdx.x] = 1;
}

__global__ void early_exit_barrier_kernel(float* out) {
  if (threadIdx.x == 7) return;
  __syncthreads();
  out[threadIdx.x] = 1;
}

__global__ void bad_mask_kernel(float* out) {
  // Lane 3 passes a mask that leaves itself out.
  const unsigned mask = threadIdx.x == 3 ? 0xfffffff7u : 0xffffffffu;
  out[threadIdx.x] = __shfl_xor_sync(mask, 1.f, 1);
}

__global__ void exited_lane_kernel(float* out) {
  if (threadIdx.x == 5) return;
  out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
}

__global__ void shuffle_barrier_deadlock_kernel(float* out) {
  if (threadIdx.x < 16)
    out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1);
  else
    __syncthreads();
}

__global__ void bad_width_kernel(float* out) { out[threadIdx.x] = __shfl_xor_sync(0xffffffffu, 1.f, 1, 12); }

// Launches `kernel` on a device of its own and returns the text of the fault cudaStreamSynchronize reports.
template <typename K>
std::string fault_of(K kernel, const char* name, int threads) {
  const int device = fresh_fault_device();
  DeviceBuffer<float> out(device, std::vector<float>(static_cast<size_t>(threads), 0.f));
  launch_kernel(make_kernel_ref(kernel, name, __FILE__, __LINE__), 1, threads, 0, out.stream(), out.get());
  // The launch itself is valid; the fault may already show (errors of running work are asynchronous).
  const cudaError_t launched = cudaGetLastError();
  EXPECT_TRUE(launched == cudaSuccess || launched == cudaErrorLaunchFailure) << cudaGetErrorName(launched);
  cudaError_t err = cudaStreamSynchronize(out.stream());
  EXPECT_EQ(err, cudaErrorLaunchFailure);
  std::string text = cudaGetErrorString(err);
  EXPECT_NE(text.find(name), std::string::npos) << text;
  EXPECT_NE(text.find("simt_test.cu"), std::string::npos) << text;
  // The context is lost: later work on that device fails with the same error.
  EXPECT_EQ(cudaStreamSynchronize(out.stream()), cudaErrorLaunchFailure);
  return text;
}

TEST(SimtFaults, DivergentBarrierIsReported) {
  std::string text = fault_of(divergent_barrier_kernel, "divergent_barrier_kernel", 64);
  EXPECT_NE(text.find("divergent __syncthreads"), std::string::npos) << text;
}

TEST(SimtFaults, BarrierNotReachedByAnExitedThreadIsReported) {
  std::string text = fault_of(early_exit_barrier_kernel, "early_exit_barrier_kernel", 32);
  EXPECT_NE(text.find("not reached by every thread"), std::string::npos) << text;
  EXPECT_NE(text.find("thread (7,0,0)"), std::string::npos) << text;
}

TEST(SimtFaults, ShuffleMaskWithoutTheCallingLaneIsReported) {
  std::string text = fault_of(bad_mask_kernel, "bad_mask_kernel", 32);
  EXPECT_NE(text.find("not in its own mask"), std::string::npos) << text;
}

TEST(SimtFaults, ShuffleMaskNamingAnExitedLaneIsReported) {
  std::string text = fault_of(exited_lane_kernel, "exited_lane_kernel", 32);
  EXPECT_NE(text.find("has exited"), std::string::npos) << text;
}

TEST(SimtFaults, ShuffleWaitingForALaneAtABarrierIsADeadlock) {
  std::string text = fault_of(shuffle_barrier_deadlock_kernel, "shuffle_barrier_deadlock_kernel", 32);
  EXPECT_NE(text.find("deadlock"), std::string::npos) << text;
}

TEST(SimtFaults, ShuffleWidthThatIsNotAPowerOfTwoIsReported) {
  std::string text = fault_of(bad_width_kernel, "bad_width_kernel", 32);
  EXPECT_NE(text.find("width 12"), std::string::npos) << text;
}

__global__ void write_kernel(float* out, float v) { out[blockIdx.x * blockDim.x + threadIdx.x] = v; }

TEST(SimtLaunch, ConfigurationsADeviceRefusesAreLaunchErrors) {
  DeviceBuffer<float> out(0, std::vector<float>(2048, 0.f));
  struct Case {
    dim3 grid, block;
    size_t shared;
    cudaError_t expected;
  };
  const Case cases[] = {
      {dim3(1), dim3(1025), 0, cudaErrorInvalidConfiguration},
      {dim3(1), dim3(32, 33), 0, cudaErrorInvalidConfiguration},
      {dim3(1), dim3(1, 1, 65), 0, cudaErrorInvalidConfiguration},
      {dim3(1, 65536), dim3(32), 0, cudaErrorInvalidConfiguration},
      {dim3(0), dim3(32), 0, cudaErrorInvalidConfiguration},
      {dim3(1), dim3(32), 64 << 10, cudaErrorInvalidValue},
  };
  for (const Case& c : cases) {
    launch_kernel(TD_KERNEL(write_kernel), c.grid, c.block, c.shared, out.stream(), out.get(), 1.f);
    cudaError_t err = cudaGetLastError();
    EXPECT_EQ(err, c.expected);
    std::string text = cudaGetErrorString(err);
    EXPECT_NE(text.find("write_kernel"), std::string::npos) << text;
    EXPECT_NE(text.find("simt_test.cu"), std::string::npos) << text;
    EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a launch error is not sticky";
  }
  // The device still works.
  launch_kernel(TD_KERNEL(write_kernel), 2, 1024, 0, out.stream(), out.get(), 3.f);
  EXPECT_EQ(out.download(), std::vector<float>(2048, 3.f));
}

TEST(SimtLaunch, AStreamOfAnotherDeviceIsAnInvalidHandle) {
  DeviceBuffer<float> out(1, std::vector<float>(32, 0.f));
  cudaStream_t of_cuda1 = out.stream();
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  launch_kernel(TD_KERNEL(write_kernel), 1, 32, 0, of_cuda1, out.get(), 1.f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
}

TEST(SimtGreenContexts, KernelsOfAPartitionRunOnItsSmsOnly) {
  auto lookup = [](const char* symbol, int version) {
    void* fn = nullptr;
    cudaDriverEntryPointQueryResult status;
    EXPECT_EQ(cudaGetDriverEntryPointByVersion(symbol, &fn, version, cudaEnableDefault, &status), cudaSuccess);
    EXPECT_EQ(status, cudaDriverEntryPointSuccess) << symbol;
    return fn;
  };
  auto get_resource = reinterpret_cast<PFN_cuDeviceGetDevResource_v12040>(lookup("cuDeviceGetDevResource", 12040));
  auto split = reinterpret_cast<PFN_cuDevSmResourceSplitByCount_v12040>(lookup("cuDevSmResourceSplitByCount", 12040));
  auto make_desc = reinterpret_cast<PFN_cuDevResourceGenerateDesc_v12040>(lookup("cuDevResourceGenerateDesc", 12040));
  auto make_ctx = reinterpret_cast<PFN_cuGreenCtxCreate_v12040>(lookup("cuGreenCtxCreate", 12040));
  auto make_stream = reinterpret_cast<PFN_cuGreenCtxStreamCreate_v12050>(lookup("cuGreenCtxStreamCreate", 12050));
  const int device = 2;
  CUdevResource whole;
  ASSERT_EQ(get_resource(device, &whole, CU_DEV_RESOURCE_TYPE_SM), CUDA_SUCCESS);
  int sms = 0;
  ASSERT_EQ(cudaDeviceGetAttribute(&sms, cudaDevAttrMultiProcessorCount, device), cudaSuccess);
  ASSERT_EQ(static_cast<int>(whole.sm.smCount), sms);
  const unsigned parts = 4, per = static_cast<unsigned>(sms) / parts;
  std::vector<CUdevResource> groups(parts);
  unsigned made = parts;
  ASSERT_EQ(split(groups.data(), &made, &whole, nullptr, 0, per), CUDA_SUCCESS);
  ASSERT_EQ(made, parts);
  CUdevResourceDesc desc;
  ASSERT_EQ(make_desc(&desc, &groups[2], 1), CUDA_SUCCESS);
  CUgreenCtx ctx;
  ASSERT_EQ(make_ctx(&ctx, desc, device, CU_GREEN_CTX_DEFAULT_STREAM), CUDA_SUCCESS);
  CUstream stream;
  ASSERT_EQ(make_stream(&stream, ctx, CU_STREAM_NON_BLOCKING, 0), CUDA_SUCCESS);
  std::vector<unsigned long long> before(static_cast<size_t>(sms));
  for (int s = 0; s < sms; ++s) before[static_cast<size_t>(s)] = sm_blocks(device, s);
  ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
  float* out = nullptr;
  ASSERT_EQ(cudaMalloc(&out, 64 * 32 * sizeof(float)), cudaSuccess);
  launch_kernel(TD_KERNEL(write_kernel), 64, 32, 0, stream, out, 2.f);
  ASSERT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  unsigned long long inside = 0, outside = 0;
  for (int s = 0; s < sms; ++s) {
    const unsigned long long ran = sm_blocks(device, s) - before[static_cast<size_t>(s)];
    const bool in_partition = s >= static_cast<int>(2 * per) && s < static_cast<int>(3 * per);
    (in_partition ? inside : outside) += ran;
  }
  EXPECT_EQ(inside, 64u);
  EXPECT_EQ(outside, 0u);
  ASSERT_EQ(cudaFree(out), cudaSuccess);
}

}  // namespace
