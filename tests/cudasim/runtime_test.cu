// The simulated CUDA runtime against the CUDA Runtime API's documented semantics: asynchronous streams and
// events, cross-device rules, the error state, memory limits, pools, pinned and pageable copies, peer access.
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/kernel_launch.cuh"
#include "tests/cudasim/sim_testing.h"

namespace {

using tandem::cuda::launch_kernel;
using namespace cudasim_testing;

// Holds its stream until the host sets *flag (pinned memory), then writes `value`. (An atomic load, which
// this simulator-only test may use, so that ThreadSanitizer builds see the hand-over.)
__global__ void wait_then_write_kernel(const int* flag, float* out, float value) {
  while (__atomic_load_n(flag, __ATOMIC_ACQUIRE) == 0) {
  }
  *out = value;
}

__global__ void copy_kernel(const float* in, float* out, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) out[i] = in[i];
}

// Loaded before any test holds a stream (see KernelsLoaded).
const ::testing::Environment* const kLoaded =
    ::testing::AddGlobalTestEnvironment(new KernelsLoaded(functions(wait_then_write_kernel, copy_kernel)));

struct PinnedFlag {
  int* flag = nullptr;
  PinnedFlag() {
    EXPECT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&flag), sizeof(int), cudaHostAllocMapped), cudaSuccess);
    *flag = 0;
  }
  void set() { __atomic_store_n(flag, 1, __ATOMIC_RELEASE); }
  ~PinnedFlag() { cudaFreeHost(flag); }
};

TEST(SimRuntime, DevicesDescribeThemselvesAsSimulated) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  EXPECT_EQ(count, 16);  // TANDEM_CUDASIM_DEVICES of this test
  cudaDeviceProp prop;
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 1), cudaSuccess);
  EXPECT_NE(std::string(prop.name).find("simulated"), std::string::npos) << prop.name;
  EXPECT_EQ(prop.multiProcessorCount, 32);
  EXPECT_EQ(prop.totalGlobalMem, size_t{64} << 20);  // TANDEM_CUDASIM_MEMORY_MB of this test
  EXPECT_EQ(cudaGetDeviceProperties(&prop, 16), cudaErrorInvalidDevice);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidDevice);
}

TEST(SimRuntime, TheHostReturnsBeforeQueuedWorkIsDone) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  PinnedFlag gate;
  DeviceBuffer<float> out(0, std::vector<float>{0.f});
  cudaEvent_t done;
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
  launch_kernel(TD_KERNEL(wait_then_write_kernel), 1, 1, 0, out.stream(), gate.flag, out.get(), 7.f);
  ASSERT_EQ(cudaEventRecord(done, out.stream()), cudaSuccess);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(cudaStreamQuery(out.stream()), cudaErrorNotReady);
  EXPECT_EQ(cudaEventQuery(done), cudaErrorNotReady);
  gate.set();
  ASSERT_EQ(cudaEventSynchronize(done), cudaSuccess);
  EXPECT_EQ(cudaEventQuery(done), cudaSuccess);
  EXPECT_EQ(cudaStreamQuery(out.stream()), cudaSuccess);
  EXPECT_EQ(out.download(), std::vector<float>{7.f});
  cudaEventDestroy(done);
}

TEST(SimRuntime, AnEventOrdersAnotherStreamAfterItsWork) {
  for (bool wait : {true, false}) {
    PinnedFlag gate;
    DeviceBuffer<float> x(0, std::vector<float>{0.f}), seen(0, std::vector<float>{-1.f});
    cudaStream_t reader;
    ASSERT_EQ(cudaStreamCreateWithFlags(&reader, cudaStreamNonBlocking), cudaSuccess);
    cudaEvent_t written;
    ASSERT_EQ(cudaEventCreateWithFlags(&written, cudaEventDisableTiming), cudaSuccess);
    launch_kernel(TD_KERNEL(wait_then_write_kernel), 1, 1, 0, x.stream(), gate.flag, x.get(), 5.f);
    ASSERT_EQ(cudaEventRecord(written, x.stream()), cudaSuccess);
    if (wait) {
      ASSERT_EQ(cudaStreamWaitEvent(reader, written, 0), cudaSuccess);
    }
    launch_kernel(TD_KERNEL(copy_kernel), 1, 32, 0, reader, x.get(), seen.get(), 1);
    if (!wait) {
      ASSERT_EQ(cudaStreamSynchronize(reader), cudaSuccess);  // runs while the writer still waits
    }
    gate.set();
    EXPECT_EQ(seen.download(), std::vector<float>{wait ? 5.f : 0.f}) << (wait ? "with" : "without") << " the wait";
    cudaEventDestroy(written);
    cudaStreamDestroy(reader);
  }
}

TEST(SimRuntime, AnEventCannotBeRecordedOnAStreamOfAnotherDevice) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaEvent_t event;
  ASSERT_EQ(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaSetDevice(1), cudaSuccess);
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  EXPECT_EQ(cudaEventRecord(event, other), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaErrorInvalidResourceHandle);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess) << "a non-sticky error is cleared once read";
  // Waiting on another device's event is allowed.
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t own;
  ASSERT_EQ(cudaStreamCreateWithFlags(&own, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(event, own), cudaSuccess);
  EXPECT_EQ(cudaStreamWaitEvent(other, event, 0), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(other), cudaSuccess);
  cudaStreamDestroy(own);
  cudaStreamDestroy(other);
  cudaEventDestroy(event);
}

TEST(SimRuntime, ADestroyedStreamIsAnInvalidHandle) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  ASSERT_EQ(cudaStreamDestroy(s), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(s), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
}

TEST(SimRuntime, ElapsedTimeNeedsTimingEvents) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  cudaEvent_t a, b, untimed;
  ASSERT_EQ(cudaEventCreate(&a), cudaSuccess);
  ASSERT_EQ(cudaEventCreate(&b), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&untimed, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(a, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(untimed, s), cudaSuccess);
  ASSERT_EQ(cudaEventRecord(b, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  float ms = -1;
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, b), cudaSuccess);
  EXPECT_GE(ms, 0.f);
  EXPECT_EQ(cudaEventElapsedTime(&ms, a, untimed), cudaErrorInvalidResourceHandle);
  cudaGetLastError();
  for (cudaEvent_t e : {a, b, untimed}) cudaEventDestroy(e);
  cudaStreamDestroy(s);
}

TEST(SimRuntime, OutOfMemoryAtTheConfiguredLimit) {
  ASSERT_EQ(cudaSetDevice(3), cudaSuccess);
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, size_t{65} << 20), cudaErrorMemoryAllocation);
  EXPECT_NE(std::string(cudaGetErrorString(cudaGetLastError())).find("TANDEM_CUDASIM_MEMORY_MB"), std::string::npos);
  ASSERT_EQ(cudaMalloc(&p, size_t{40} << 20), cudaSuccess);
  void* q = nullptr;
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  EXPECT_EQ(cudaMallocAsync(&q, size_t{30} << 20, s), cudaErrorMemoryAllocation);
  cudaGetLastError();
  ASSERT_EQ(cudaFree(p), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&q, size_t{30} << 20, s), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(q, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  // Freed pool memory is given back for a larger request once its free has run.
  ASSERT_EQ(cudaMallocAsync(&q, size_t{60} << 20, s), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(q, s), cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(s), cudaSuccess);
  cudaStreamDestroy(s);
}

TEST(SimRuntime, FreshMemoryReadsAsNaN) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  cudaStream_t s;
  ASSERT_EQ(cudaStreamCreate(&s), cudaSuccess);
  float* p = nullptr;
  ASSERT_EQ(cudaMallocAsync(reinterpret_cast<void**>(&p), 100 * sizeof(float), s), cudaSuccess);
  std::vector<float> host(100, 0.f);
  ASSERT_EQ(cudaMemcpyAsync(host.data(), p, 100 * sizeof(float), cudaMemcpyDeviceToHost, s), cudaSuccess);
  for (float v : host) EXPECT_TRUE(std::isnan(v));
  ASSERT_EQ(cudaFreeAsync(p, s), cudaSuccess);
  cudaStreamDestroy(s);
}

TEST(SimRuntime, PoolMemoryIsReusedInStreamOrder) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  PinnedFlag gate;
  DeviceBuffer<float> sink(0, std::vector<float>{0.f});
  cudaStream_t other;
  ASSERT_EQ(cudaStreamCreateWithFlags(&other, cudaStreamNonBlocking), cudaSuccess);
  // The first stream is held, so its free has not run yet when the next allocations are made.
  launch_kernel(TD_KERNEL(wait_then_write_kernel), 1, 1, 0, sink.stream(), gate.flag, sink.get(), 1.f);
  void *a = nullptr, *b = nullptr, *c = nullptr;
  ASSERT_EQ(cudaMallocAsync(&a, 4096, sink.stream()), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(a, sink.stream()), cudaSuccess);
  ASSERT_EQ(cudaMallocAsync(&b, 4096, other), cudaSuccess);
  EXPECT_NE(b, a) << "another stream may not take memory whose free has not run";
  ASSERT_EQ(cudaMallocAsync(&c, 4096, sink.stream()), cudaSuccess);
  EXPECT_EQ(c, a) << "the freeing stream may reuse it at once: stream order puts the free first";
  gate.set();
  ASSERT_EQ(cudaFreeAsync(b, other), cudaSuccess);
  ASSERT_EQ(cudaFreeAsync(c, sink.stream()), cudaSuccess);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(c, sink.stream()), cudaErrorInvalidValue) << "a double free";
  cudaGetLastError();
  cudaStreamDestroy(other);
}

TEST(SimRuntime, PageableCopiesAreStagedAndSynchronous) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceBuffer<float> dev(0, std::vector<float>(64, 0.f));
  const unsigned long long before = tandem_cudasim_pageable_copies();
  std::vector<float> src(64, 3.f);
  ASSERT_EQ(cudaMemcpyAsync(dev.get(), src.data(), 64 * sizeof(float), cudaMemcpyHostToDevice, dev.stream()),
            cudaSuccess);
  std::fill(src.begin(), src.end(), 9.f);  // the copy took the values at the call
  std::vector<float> back(64, 0.f);
  ASSERT_EQ(cudaMemcpyAsync(back.data(), dev.get(), 64 * sizeof(float), cudaMemcpyDeviceToHost, dev.stream()),
            cudaSuccess);
  EXPECT_EQ(back, std::vector<float>(64, 3.f)) << "a copy to pageable memory is done when the call returns";
  EXPECT_EQ(tandem_cudasim_pageable_copies() - before, 2u);
}

TEST(SimRuntime, PinnedCopiesAreAsynchronous) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  PinnedFlag gate;
  DeviceBuffer<float> dev(0, std::vector<float>{0.f});
  float* pinned = nullptr;
  ASSERT_EQ(cudaHostAlloc(reinterpret_cast<void**>(&pinned), sizeof(float), cudaHostAllocPortable), cudaSuccess);
  *pinned = -1.f;
  launch_kernel(TD_KERNEL(wait_then_write_kernel), 1, 1, 0, dev.stream(), gate.flag, dev.get(), 4.f);
  ASSERT_EQ(cudaMemcpyAsync(pinned, dev.get(), sizeof(float), cudaMemcpyDeviceToHost, dev.stream()), cudaSuccess);
  EXPECT_EQ(*pinned, -1.f) << "the copy waits behind the kernel";
  gate.set();
  ASSERT_EQ(cudaStreamSynchronize(dev.stream()), cudaSuccess);
  EXPECT_EQ(*pinned, 4.f);
  ASSERT_EQ(cudaFreeHost(pinned), cudaSuccess);
}

TEST(SimRuntime, CopiesWhoseKindDoesNotMatchThePointersAreRefused) {
  DeviceBuffer<float> dev(0, std::vector<float>(4, 0.f));
  std::vector<float> host(4, 0.f);
  EXPECT_EQ(cudaMemcpyAsync(dev.get(), host.data(), 16, cudaMemcpyDeviceToHost, dev.stream()), cudaErrorInvalidValue);
  EXPECT_NE(std::string(cudaGetErrorString(cudaGetLastError())).find("copy kind"), std::string::npos);
  EXPECT_EQ(cudaMemcpyAsync(dev.get(), host.data(), 32, cudaMemcpyHostToDevice, dev.stream()), cudaErrorInvalidValue)
      << "32 bytes overrun a 16-byte allocation";
  cudaGetLastError();
}

TEST(SimRuntime, PeerCopiesNeedNoPeerAccess) {
  DeviceBuffer<float> a(0, std::vector<float>{1.f, 2.f}), b(1, std::vector<float>{0.f, 0.f});
  ASSERT_EQ(cudaMemcpyPeerAsync(b.get(), 1, a.get(), 0, 2 * sizeof(float), b.stream()), cudaSuccess);
  EXPECT_EQ(b.download(), (std::vector<float>{1.f, 2.f}));
}

// A kernel on `reader_device` reading memory of another device: how the simulator answers with and without
// the access a GPU needs. Each case uses devices of its own, as the fault is sticky.
struct Outcome {
  std::string text;  // "ok", or the error's name and text
  int reader;
};
Outcome read_other_device(bool pool, bool enable_peer, bool pool_access) {
  const int owner = fresh_fault_device(), reader = fresh_fault_device();
  cudaSetDevice(owner);
  cudaStream_t owner_stream;
  cudaStreamCreateWithFlags(&owner_stream, cudaStreamNonBlocking);
  float* src = nullptr;
  if (pool)
    cudaMallocAsync(reinterpret_cast<void**>(&src), sizeof(float), owner_stream);
  else
    cudaMalloc(reinterpret_cast<void**>(&src), sizeof(float));
  const float one = 1.f;
  cudaMemcpyAsync(src, &one, sizeof(float), cudaMemcpyHostToDevice, owner_stream);
  cudaStreamSynchronize(owner_stream);
  if (pool_access) {
    cudaMemPool_t mem_pool;
    cudaDeviceGetDefaultMemPool(&mem_pool, owner);
    cudaMemAccessDesc desc = {};
    desc.location.type = cudaMemLocationTypeDevice;
    desc.location.id = reader;
    desc.flags = cudaMemAccessFlagsProtReadWrite;
    EXPECT_EQ(cudaMemPoolSetAccess(mem_pool, &desc, 1), cudaSuccess);
  }
  DeviceBuffer<float> out(reader, std::vector<float>{0.f});
  if (enable_peer) {
    EXPECT_EQ(cudaDeviceEnablePeerAccess(owner, 0), cudaSuccess);
  }
  launch_kernel(TD_KERNEL(copy_kernel), 1, 32, 0, out.stream(), src, out.get(), 1);
  cudaError_t err = cudaStreamSynchronize(out.stream());
  std::string result = err == cudaSuccess ? "ok" : std::string(cudaGetErrorName(err)) + ": " + cudaGetErrorString(err);
  if (err == cudaSuccess) {
    EXPECT_EQ(out.download(), std::vector<float>{1.f});
  }
  cudaGetLastError();
  return Outcome{result, reader};
}

TEST(SimRuntime, KernelsReadOtherDevicesMemoryOnlyWithAccess) {
  std::string denied = read_other_device(false, false, false).text;
  EXPECT_NE(denied.find("cudaErrorIllegalAddress"), std::string::npos) << denied;
  EXPECT_NE(denied.find("copy_kernel"), std::string::npos) << denied;
  EXPECT_NE(denied.find("no peer access"), std::string::npos) << denied;
  EXPECT_EQ(read_other_device(false, true, false).text, "ok");
  std::string pool_denied = read_other_device(true, true, false).text;
  EXPECT_NE(pool_denied.find("cudaMemPoolSetAccess"), std::string::npos)
      << "peer access does not cover pool memory: " << pool_denied;
  EXPECT_EQ(read_other_device(true, false, true).text, "ok");
}

TEST(SimRuntime, AStickyErrorStaysForEveryLaterCallOnItsDevice) {
  Outcome first = read_other_device(false, false, false);
  ASSERT_NE(first.text, "ok");
  ASSERT_EQ(cudaSetDevice(first.reader), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress) << "reading a sticky error does not clear it";
  void* p = nullptr;
  cudaStream_t s;
  EXPECT_NE(cudaStreamCreate(&s), cudaSuccess);
  EXPECT_NE(cudaMallocAsync(&p, 16, nullptr), cudaSuccess);
  // Other devices are unaffected (once the thread's last error, which those calls set, has been read).
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  EXPECT_EQ(cudaGetLastError(), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaGetLastError(), cudaSuccess);
  ASSERT_EQ(cudaMalloc(&p, 16), cudaSuccess);
  EXPECT_EQ(cudaFree(p), cudaSuccess);
}

}  // namespace
