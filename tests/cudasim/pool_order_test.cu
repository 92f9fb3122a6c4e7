// The simulator's check of stream-ordered pool memory (CUDA Runtime API, "Stream Ordered Memory Allocator"):
// work may touch a cudaMallocAsync block only once the allocation is ordered before it and only until its
// cudaFreeAsync, which must be ordered after it. Each wrong schedule holds one stream behind a gate so that the
// misuse happens every run, and must fault naming the work, the block and the streams; the same schedule with
// its events runs clean.
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/kernel_launch.cuh"
#include "tests/cudasim/sim_testing.h"

namespace {

using tandem::cuda::launch_kernel;
using namespace cudasim_testing;

// Holds its stream until the host sets *flag (pinned memory).
__global__ void wait_kernel(const int* flag) {
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0) {
  }
}

__global__ void fill_kernel(float* out, float value, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = value;
}

__global__ void copy_kernel(const float* in, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i];
}

// A kernel parameter with a word that is no pointer, as stack garbage in a struct's padding can be.
struct FillWithStray {
  float* out;
  uint64_t stray;
};
__global__ void fill_stray_kernel(FillWithStray a, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) a.out[i] = 1.f;
}

// A fresh random number of floats (1 to 1000) for a test's pool block.
int random_count() {
  std::mt19937_64 g = rng();
  return std::uniform_int_distribution<int>(1, 1000)(g);
}

// A stream held behind a gate: its work waits for an event of a stream that runs a kernel spinning on a flag.
class Gate {
 public:
  Gate() {
    EXPECT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&flag_), sizeof(int), cudaHostAllocMapped), cudaSuccess);
    *flag_ = 0;
    expect_ok(cudaStreamCreateWithFlags(&spinner_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    expect_ok(cudaEventCreateWithFlags(&opened_, cudaEventDisableTiming), "cudaEventCreateWithFlags");
    launch_kernel(TD_KERNEL(wait_kernel), 1, 1, 0, spinner_, flag_);
    expect_ok(cudaEventRecord(opened_, spinner_), "cudaEventRecord");
  }
  ~Gate() {
    open();
    cudaStreamSynchronize(spinner_);
    cudaEventDestroy(opened_);
    cudaStreamDestroy(spinner_);
    // The flag is not freed: on a device a test faults on purpose the synchronize returns at once while the
    // kernel may still poll it (as StreamGate's in sim_testing.h; ASan saw a use after free here).
    cudaGetLastError();
  }
  // Queues on s a wait for the gate.
  void hold(cudaStream_t s) { expect_ok(cudaStreamWaitEvent(s, opened_, 0), "cudaStreamWaitEvent"); }
  void open() { __atomic_store_n(flag_, 1, __ATOMIC_RELEASE); }

 private:
  int* flag_ = nullptr;
  cudaStream_t spinner_ = nullptr;
  cudaEvent_t opened_ = nullptr;
};

// Two streams of a device (made current) and an event.
struct Streams {
  explicit Streams(int device) {
    expect_ok(cudaSetDevice(device), "cudaSetDevice");
    expect_ok(cudaStreamCreateWithFlags(&a, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    expect_ok(cudaStreamCreateWithFlags(&b, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    expect_ok(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreateWithFlags");
  }
  ~Streams() {
    cudaEventDestroy(event);
    cudaStreamDestroy(a);
    cudaStreamDestroy(b);
    cudaGetLastError();
  }
  // Orders `to`'s later work after what is queued on `from` so far.
  void order(cudaStream_t from, cudaStream_t to) {
    expect_ok(cudaEventRecord(event, from), "cudaEventRecord");
    expect_ok(cudaStreamWaitEvent(to, event, 0), "cudaStreamWaitEvent");
  }
  cudaStream_t a = nullptr, b = nullptr;
  cudaEvent_t event = nullptr;
};

// "ok", or the error's name and text.
std::string outcome(cudaError_t err) {
  return err == cudaSuccess ? "ok" : std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
}

void expect_parts(const std::string& text, const std::vector<std::string>& parts) {
  for (const std::string& p : parts) EXPECT_TRUE(contains(text, p)) << "'" << p << "' not in: " << text;
}

// Loaded before any test holds a stream (see KernelsLoaded).
const ::testing::Environment* const kLoaded = ::testing::AddGlobalTestEnvironment(
    new KernelsLoaded(functions(wait_kernel, fill_kernel, copy_kernel, fill_stray_kernel)));

// Allocates n floats on stream a while a is held, and fills them from stream b: with `ordered`, b first waits
// for an event recorded on a after the allocation. Returns the outcome and, when it ran, the values.
std::string use_before_allocation(int device, bool ordered, int n, std::vector<float>* values) {
  Streams s(device);
  Gate gate;
  gate.hold(s.a);
  float* p = nullptr;
  expect_ok(cudaMallocAsync(reinterpret_cast<void**>(&p), n * sizeof(float), s.a), "cudaMallocAsync");
  if (ordered) s.order(s.a, s.b);
  launch_kernel(TD_KERNEL(fill_kernel), 2, 64, 0, s.b, p, 3.5f, n);
  if (!ordered) {
    // b does not wait for the gate: its kernel runs while a still holds the allocation back.
    const std::string text = outcome(cudaStreamSynchronize(s.b));
    gate.open();
    return text;
  }
  gate.open();
  const cudaError_t err = cudaStreamSynchronize(s.b);
  values->assign(static_cast<size_t>(n), 0.f);
  expect_ok(cudaMemcpy(values->data(), p, n * sizeof(float), cudaMemcpyDeviceToHost), "cudaMemcpy");
  expect_ok(cudaFreeAsync(p, s.a), "cudaFreeAsync");
  expect_ok(cudaStreamSynchronize(s.a), "cudaStreamSynchronize");
  return outcome(err);
}

TEST(SimPoolOrder, WorkOnAnotherStreamBeforeTheAllocationRanFaults) {
  const int n = random_count();
  std::vector<float> unused;
  const std::string text = use_before_allocation(fresh_fault_device(), false, n, &unused);
  expect_parts(text, {"cudaErrorIllegalAddress", "kernel fill_kernel", "pool block",
                      std::to_string(n * sizeof(float)) + " bytes", "cudaMallocAsync on stream",
                      "before that allocation ran", "record an event"});
}

TEST(SimPoolOrder, WorkOrderedAfterTheAllocationByAnEventRunsClean) {
  const int n = random_count();
  std::vector<float> values;
  EXPECT_EQ(use_before_allocation(0, true, n, &values), "ok");
  EXPECT_EQ(values, std::vector<float>(static_cast<size_t>(n), 3.5f));
}

// Fills a block on stream a, reads it on stream b (ordered after the fill), and frees it on a: with `ordered`, a
// first waits for an event recorded on b after the read (what Tandem's record_stream does). b is held behind a
// gate, so without that event the free runs before the read.
std::string use_after_free(int device, bool ordered, int n, std::vector<float>* values) {
  Streams s(device);
  Gate gate;
  float* p = nullptr;
  DeviceBuffer<float> out(device, static_cast<size_t>(n));
  expect_ok(cudaMallocAsync(reinterpret_cast<void**>(&p), n * sizeof(float), s.a), "cudaMallocAsync");
  launch_kernel(TD_KERNEL(fill_kernel), 2, 64, 0, s.a, p, -2.f, n);
  s.order(s.a, s.b);
  gate.hold(s.b);
  launch_kernel(TD_KERNEL(copy_kernel), 2, 64, 0, s.b, p, out.get(), n);
  if (ordered) s.order(s.b, s.a);
  expect_ok(cudaFreeAsync(p, s.a), "cudaFreeAsync");
  if (!ordered) expect_ok(cudaStreamSynchronize(s.a), "cudaStreamSynchronize (the free runs before the read)");
  gate.open();
  const cudaError_t err = cudaStreamSynchronize(s.b);
  if (err == cudaSuccess) *values = out.download();
  return outcome(err);
}

TEST(SimPoolOrder, WorkOnAnotherStreamAfterTheFreeRanFaults) {
  const int n = random_count();
  std::vector<float> unused;
  const std::string text = use_after_free(fresh_fault_device(), false, n, &unused);
  expect_parts(text, {"cudaErrorIllegalAddress", "kernel copy_kernel", "pool block", "cudaFreeAsync on stream",
                      "ran: nothing orders the free after this work", "record_stream"});
}

TEST(SimPoolOrder, AFreeOrderedAfterTheLastUseRunsClean) {
  const int n = random_count();
  std::vector<float> values;
  EXPECT_EQ(use_after_free(0, true, n, &values), "ok");
  EXPECT_EQ(values, std::vector<float>(static_cast<size_t>(n), -2.f));
}

TEST(SimPoolOrder, CopiesQueuedAfterTheFreeFault) {
  const int device = fresh_fault_device();
  Streams s(device);
  float* p = nullptr;
  ASSERT_CUDA_OK(cudaMallocAsync(reinterpret_cast<void**>(&p), 64 * sizeof(float), s.a));
  ASSERT_CUDA_OK(cudaFreeAsync(p, s.a));
  ASSERT_CUDA_OK(cudaMemsetAsync(p, 0, 64 * sizeof(float), s.a));  // on the freeing stream, after the free
  expect_parts(outcome(cudaStreamSynchronize(s.a)),
               {"cudaErrorIllegalAddress", "cudaMemsetAsync", "pool block", "freed before this work was queued"});
}

// A parameter word holding an address inside a freed block (the low byte a flag's, as when a bool's padding
// keeps an old pointer's upper bytes) faults as a use after free, and the message says the word may be padding.
TEST(SimPoolOrder, AParameterWordIntoAFreedBlockFaultsNamingPadding) {
  const int device = fresh_fault_device();
  Streams s(device);
  const int n = random_count();
  float *freed = nullptr, *out = nullptr;
  ASSERT_CUDA_OK(cudaMallocAsync(reinterpret_cast<void**>(&freed), 64 * sizeof(float), s.a));
  ASSERT_CUDA_OK(cudaMallocAsync(reinterpret_cast<void**>(&out), n * sizeof(float), s.a));
  ASSERT_CUDA_OK(cudaFreeAsync(freed, s.a));
  const FillWithStray a{out, reinterpret_cast<uint64_t>(freed) | 1};
  launch_kernel(TD_KERNEL(fill_stray_kernel), 2, 64, 0, s.a, a, n);
  expect_parts(outcome(cudaStreamSynchronize(s.a)),
               {"cudaErrorIllegalAddress", "kernel fill_stray_kernel", "freed before this work was queued",
                "a word of the kernel's parameters", "padding"});
}

}  // namespace
