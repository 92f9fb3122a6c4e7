// The simulated GPU's stream capture and CUDA graphs against the CUDA Runtime API's documented rules: captured work
// runs only when the graph is launched, in stream order, on the memory of that time; fork and join through events;
// each call a capture forbids fails with CUDA's code and invalidates the capture; graph memory; update.
#include <gtest/gtest.h>

#include <chrono>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cuda/kernel_launch.cuh"
#include "tests/cudasim/sim_testing.h"

namespace {

using tandem::cuda::launch_kernel;
using namespace cudasim_testing;

// y = a * x + y, elementwise.
__global__ void axpy_kernel(float a, const float* x, float* y, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = a * x[i] + y[i];
}

__global__ void fill_kernel(float* y, float v, int n) {
  for (int i = blockIdx.x * blockDim.x + threadIdx.x; i < n; i += gridDim.x * blockDim.x) y[i] = v;
}

void CUDART_CB count_host(void* counter) { ++*static_cast<int*>(counter); }

std::vector<cudaGraphNodeType> node_types(cudaGraph_t g) {
  size_t n = 0;
  EXPECT_EQ(cudaGraphGetNodes(g, nullptr, &n), cudaSuccess);
  std::vector<cudaGraphNode_t> nodes(n);
  EXPECT_EQ(cudaGraphGetNodes(g, nodes.data(), &n), cudaSuccess);
  std::vector<cudaGraphNodeType> types;
  for (cudaGraphNode_t node : nodes) {
    cudaGraphNodeType t;
    EXPECT_EQ(cudaGraphNodeGetType(node, &t), cudaSuccess);
    types.push_back(t);
  }
  return types;
}

cudaStreamCaptureStatus status_of(cudaStream_t s) {
  cudaStreamCaptureStatus st = cudaStreamCaptureStatusNone;
  EXPECT_EQ(cudaStreamIsCapturing(s, &st), cudaSuccess);
  return st;
}

// Ends a capture that must fail with cudaErrorStreamCaptureInvalidated, leaving the stream usable.
void expect_invalidated(cudaStream_t s) {
  EXPECT_EQ(status_of(s), cudaStreamCaptureStatusInvalidated);
  cudaGraph_t g = reinterpret_cast<cudaGraph_t>(1);
  EXPECT_EQ(cudaStreamEndCapture(s, &g), cudaErrorStreamCaptureInvalidated);
  EXPECT_EQ(g, nullptr);
  EXPECT_EQ(status_of(s), cudaStreamCaptureStatusNone);
  cudaGetLastError();
}

TEST(SimGraph, CapturedWorkRunsAtEachLaunchInStreamOrderOnTheMemoryOfThatTime) {
  ASSERT_CUDA_OK(cudaSetDevice(0));
  auto g = rng();
  const int n = 300;
  std::vector<float> x0 = uniform<float>(n, g), y0 = uniform<float>(n, g);
  DeviceBuffer<float> x(0, x0), y(0, y0), z(0, n);
  TestStream s(0);
  int host_calls = 0;
  ASSERT_CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal));
  EXPECT_EQ(status_of(s.get()), cudaStreamCaptureStatusActive);
  launch_kernel(TD_KERNEL(axpy_kernel), 2, 128, 0, s.get(), 2.f, x.get(), y.get(), n);
  ASSERT_CUDA_OK(cudaGetLastError());
  ASSERT_CUDA_OK(cudaMemcpyAsync(z.get(), y.get(), n * sizeof(float), cudaMemcpyDeviceToDevice, s.get()));
  ASSERT_CUDA_OK(cudaLaunchHostFunc(s.get(), count_host, &host_calls));
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA_OK(cudaStreamEndCapture(s.get(), &graph));
  EXPECT_EQ(status_of(s.get()), cudaStreamCaptureStatusNone);
  EXPECT_EQ(node_types(graph),
            (std::vector<cudaGraphNodeType>{cudaGraphNodeTypeKernel, cudaGraphNodeTypeMemcpy, cudaGraphNodeTypeHost}));
  // Capture ran nothing.
  EXPECT_EQ(y.download(), y0);
  EXPECT_EQ(host_calls, 0);

  cudaGraphExec_t exec = nullptr;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  std::vector<float> xs = x0, ys = y0;
  for (int launch = 0; launch < 3; ++launch) {
    // New inputs, queued before the launch on its stream: the launch sees them.
    xs = uniform<float>(n, g);
    ASSERT_CUDA_OK(cudaMemcpyAsync(x.get(), xs.data(), n * sizeof(float), cudaMemcpyHostToDevice, s.get()));
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, s.get()));
    ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
    for (int i = 0; i < n; ++i) ys[i] = 2.f * xs[i] + ys[i];
    EXPECT_EQ(y.download(), ys) << "launch " << launch;
    EXPECT_EQ(z.download(), ys) << "launch " << launch;
    EXPECT_EQ(host_calls, launch + 1);
  }
  ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
  ASSERT_CUDA_OK(cudaGraphDestroy(graph));
  EXPECT_EQ(cudaGraphDestroy(graph), cudaErrorInvalidValue);
}

TEST(SimGraph, ForkAndJoinThroughEventsCaptureOtherStreams) {
  ASSERT_CUDA_OK(cudaSetDevice(0));
  const int n = 64;
  DeviceBuffer<float> a(0, n), b(0, n), ones(0, std::vector<float>(n, 1.f));
  TestStream s0(0), s1(0);
  cudaEvent_t fork, join;
  ASSERT_CUDA_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  ASSERT_CUDA_OK(cudaEventCreateWithFlags(&join, cudaEventDisableTiming));
  ASSERT_CUDA_OK(cudaStreamBeginCapture(s0.get(), cudaStreamCaptureModeGlobal));
  ASSERT_CUDA_OK(cudaEventRecord(fork, s0.get()));
  ASSERT_CUDA_OK(cudaStreamWaitEvent(s1.get(), fork, 0));
  EXPECT_EQ(status_of(s1.get()), cudaStreamCaptureStatusActive);
  launch_kernel(TD_KERNEL(fill_kernel), 1, 64, 0, s1.get(), a.get(), 3.f, n);
  launch_kernel(TD_KERNEL(fill_kernel), 1, 64, 0, s0.get(), b.get(), 4.f, n);
  ASSERT_CUDA_OK(cudaEventRecord(join, s1.get()));
  ASSERT_CUDA_OK(cudaStreamWaitEvent(s0.get(), join, 0));
  launch_kernel(TD_KERNEL(axpy_kernel), 1, 64, 0, s0.get(), 2.f, a.get(), b.get(), n);  // b = 2a + b
  cudaGraph_t graph = nullptr;
  ASSERT_CUDA_OK(cudaStreamEndCapture(s0.get(), &graph));
  EXPECT_EQ(status_of(s1.get()), cudaStreamCaptureStatusNone);
  // The last kernel depends on both branches.
  size_t count = 3;
  cudaGraphNode_t nodes[3];
  ASSERT_CUDA_OK(cudaGraphGetNodes(graph, nodes, &count));
  ASSERT_EQ(count, 3u);
  size_t deps = 0;
  ASSERT_CUDA_OK(cudaGraphNodeGetDependencies(nodes[2], nullptr, nullptr, &deps));
  EXPECT_EQ(deps, 2u);
  ASSERT_CUDA_OK(cudaGraphNodeGetDependencies(nodes[0], nullptr, nullptr, &deps));
  EXPECT_EQ(deps, 0u);
  cudaGraphExec_t exec;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  ASSERT_CUDA_OK(cudaGraphLaunch(exec, s1.get()));
  ASSERT_CUDA_OK(cudaStreamSynchronize(s1.get()));
  EXPECT_EQ(b.download(), std::vector<float>(n, 10.f));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaEventDestroy(fork);
  cudaEventDestroy(join);
}

TEST(SimGraph, AForkedStreamThatDoesNotJoinFailsEndCaptureWithUnjoined) {
  ASSERT_CUDA_OK(cudaSetDevice(0));
  DeviceBuffer<float> a(0, 8);
  TestStream s0(0), s1(0);
  cudaEvent_t fork;
  ASSERT_CUDA_OK(cudaEventCreateWithFlags(&fork, cudaEventDisableTiming));
  ASSERT_CUDA_OK(cudaStreamBeginCapture(s0.get(), cudaStreamCaptureModeGlobal));
  ASSERT_CUDA_OK(cudaEventRecord(fork, s0.get()));
  ASSERT_CUDA_OK(cudaStreamWaitEvent(s1.get(), fork, 0));
  launch_kernel(TD_KERNEL(fill_kernel), 1, 8, 0, s1.get(), a.get(), 1.f, 8);
  // Ending on the forked stream is not ending the capture.
  cudaGraph_t graph = reinterpret_cast<cudaGraph_t>(1);
  EXPECT_EQ(cudaStreamEndCapture(s1.get(), &graph), cudaErrorStreamCaptureUnmatched);
  cudaGetLastError();
  EXPECT_EQ(cudaStreamBeginCapture(s1.get(), cudaStreamCaptureModeGlobal), cudaErrorIllegalState);  // it captures
  cudaGetLastError();
  EXPECT_EQ(status_of(s1.get()), cudaStreamCaptureStatusActive);
  EXPECT_EQ(cudaStreamEndCapture(s0.get(), &graph), cudaErrorStreamCaptureUnjoined);
  EXPECT_EQ(graph, nullptr);
  cudaGetLastError();
  EXPECT_EQ(status_of(s0.get()), cudaStreamCaptureStatusNone);
  EXPECT_EQ(status_of(s1.get()), cudaStreamCaptureStatusNone);
  // Both streams run work again.
  launch_kernel(TD_KERNEL(fill_kernel), 1, 8, 0, s1.get(), a.get(), 5.f, 8);
  ASSERT_CUDA_OK(cudaStreamSynchronize(s1.get()));
  EXPECT_EQ(a.download(), std::vector<float>(8, 5.f));
  cudaEventDestroy(fork);
}

// One forbidden call made while `s` captures; `code` is what it must return.
struct Forbidden {
  const char* name;
  cudaError_t code;
  std::function<cudaError_t(cudaStream_t s, cudaEvent_t captured, cudaEvent_t outside)> call;
};

TEST(SimGraph, EachForbiddenCallFailsWithCudasCodeAndInvalidatesTheCapture) {
  ASSERT_CUDA_OK(cudaSetDevice(0));
  void* pool_block = nullptr;
  void* plain = nullptr;
  const std::vector<Forbidden> calls = {
      {"cudaStreamSynchronize of the capturing stream", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t s, cudaEvent_t, cudaEvent_t) { return cudaStreamSynchronize(s); }},
      {"cudaStreamQuery of the capturing stream", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t s, cudaEvent_t, cudaEvent_t) { return cudaStreamQuery(s); }},
      {"cudaDeviceSynchronize", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t, cudaEvent_t, cudaEvent_t) { return cudaDeviceSynchronize(); }},
      {"cudaMalloc in global mode", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t, cudaEvent_t, cudaEvent_t) {
         void* p = nullptr;
         return cudaMalloc(&p, 256);
       }},
      {"cudaHostAlloc in global mode", cudaErrorStreamCaptureUnsupported,
       [](cudaStream_t, cudaEvent_t, cudaEvent_t) {
         void* p = nullptr;
         return cudaHostAlloc(&p, 256, 0);
       }},
      {"cudaFree (synchronizes the device)", cudaErrorStreamCaptureUnsupported,
       [&](cudaStream_t, cudaEvent_t, cudaEvent_t) { return cudaFree(plain); }},
      {"cudaEventQuery of an event recorded in the capture", cudaErrorCapturedEvent,
       [](cudaStream_t, cudaEvent_t captured, cudaEvent_t) { return cudaEventQuery(captured); }},
      {"cudaEventSynchronize of an event recorded in the capture", cudaErrorCapturedEvent,
       [](cudaStream_t, cudaEvent_t captured, cudaEvent_t) { return cudaEventSynchronize(captured); }},
      {"a wait on an event recorded outside the capture", cudaErrorStreamCaptureIsolation,
       [](cudaStream_t s, cudaEvent_t, cudaEvent_t outside) { return cudaStreamWaitEvent(s, outside, 0); }},
      {"cudaFreeAsync of memory allocated outside the graph", cudaErrorInvalidValue,
       [&](cudaStream_t s, cudaEvent_t, cudaEvent_t) { return cudaFreeAsync(pool_block, s); }},
      {"a copy from pageable memory (synchronous for the host)", cudaErrorStreamCaptureUnsupported,
       [&](cudaStream_t s, cudaEvent_t, cudaEvent_t) {
         static float host[4];
         return cudaMemcpyAsync(plain, host, sizeof(host), cudaMemcpyHostToDevice, s);
       }},
  };
  for (const Forbidden& f : calls) {
    SCOPED_TRACE(f.name);
    TestStream s(0), other(0);
    ASSERT_CUDA_OK(cudaMallocAsync(&pool_block, 256, s.get()));
    ASSERT_CUDA_OK(cudaMalloc(&plain, 256));
    ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
    cudaEvent_t captured, outside;
    ASSERT_CUDA_OK(cudaEventCreateWithFlags(&captured, cudaEventDisableTiming));
    ASSERT_CUDA_OK(cudaEventCreateWithFlags(&outside, cudaEventDisableTiming));
    ASSERT_CUDA_OK(cudaEventRecord(outside, other.get()));
    ASSERT_CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal));
    ASSERT_CUDA_OK(cudaMemsetAsync(pool_block, 0, 256, s.get()));
    ASSERT_CUDA_OK(cudaEventRecord(captured, s.get()));
    EXPECT_EQ(f.call(s.get(), captured, outside), f.code);
    EXPECT_EQ(cudaGetLastError(), f.code);
    // Later work on the stream is refused until the capture ends.
    EXPECT_EQ(cudaMemsetAsync(pool_block, 0, 256, s.get()), cudaErrorStreamCaptureInvalidated);
    cudaGetLastError();
    expect_invalidated(s.get());
    // The events' capture ended with it.
    EXPECT_EQ(cudaEventQuery(captured), cudaSuccess);
    ASSERT_CUDA_OK(cudaFreeAsync(pool_block, s.get()));
    ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
    cudaFree(plain);
    cudaGetLastError();
    cudaEventDestroy(captured);
    cudaEventDestroy(outside);
  }
}

TEST(SimGraph, CaptureModesDecideWhoMayMakeUnsafeCalls) {
  ASSERT_CUDA_OK(cudaSetDevice(0));
  TestStream s(0);
  void* leaked = nullptr;
  auto malloc_on_other_thread = [&](cudaStreamCaptureMode mode) {
    cudaError_t result = cudaSuccess;
    std::thread t([&] {
      cudaSetDevice(0);
      cudaStreamCaptureMode m = mode;
      cudaThreadExchangeStreamCaptureMode(&m);
      result = cudaMalloc(&leaked, 64);  // freed after the capture: cudaFree would synchronize the device
      cudaGetLastError();
    });
    t.join();
    return result;
  };
  cudaGraph_t graph = nullptr;
  // Relaxed: even the capturing thread may call cudaMalloc.
  ASSERT_CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeRelaxed));
  void* p = nullptr;
  EXPECT_EQ(cudaMalloc(&p, 64), cudaSuccess);
  ASSERT_CUDA_OK(cudaStreamEndCapture(s.get(), &graph));
  cudaGraphDestroy(graph);
  ASSERT_CUDA_OK(cudaFree(p));
  // Thread-local: other threads are not concerned.
  ASSERT_CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
  EXPECT_EQ(malloc_on_other_thread(cudaStreamCaptureModeGlobal), cudaSuccess);
  ASSERT_CUDA_OK(cudaStreamEndCapture(s.get(), &graph));
  cudaGraphDestroy(graph);
  ASSERT_CUDA_OK(cudaFree(leaked));
  // Global: another thread in global mode may not, one that switched itself to relaxed may.
  ASSERT_CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal));
  EXPECT_EQ(malloc_on_other_thread(cudaStreamCaptureModeRelaxed), cudaSuccess);
  EXPECT_EQ(status_of(s.get()), cudaStreamCaptureStatusActive);
  void* allowed = leaked;
  EXPECT_EQ(malloc_on_other_thread(cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  expect_invalidated(s.get());
  ASSERT_CUDA_OK(cudaFree(allowed));
  // A non-relaxed capture must end on the thread that began it.
  ASSERT_CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeThreadLocal));
  cudaError_t other = cudaSuccess;
  std::thread([&] { other = cudaStreamEndCapture(s.get(), &graph); }).join();
  EXPECT_EQ(other, cudaErrorStreamCaptureWrongThread);
  ASSERT_CUDA_OK(cudaStreamEndCapture(s.get(), &graph));
  cudaGraphDestroy(graph);
}

TEST(SimGraph, TheLegacyStreamCannotBeCapturedNorUsedWhileABlockingStreamCaptures) {
  ASSERT_CUDA_OK(cudaSetDevice(1));
  EXPECT_EQ(cudaStreamBeginCapture(nullptr, cudaStreamCaptureModeGlobal), cudaErrorStreamCaptureUnsupported);
  cudaGetLastError();
  DeviceBuffer<float> a(1, 16);
  cudaStream_t blocking;
  ASSERT_CUDA_OK(cudaStreamCreate(&blocking));  // not cudaStreamNonBlocking
  ASSERT_CUDA_OK(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaStreamBeginCapture(blocking, cudaStreamCaptureModeGlobal), cudaErrorIllegalState);
  // Asking the legacy stream is refused without invalidating; using it invalidates.
  cudaStreamCaptureStatus st;
  EXPECT_EQ(cudaStreamIsCapturing(nullptr, &st), cudaErrorStreamCaptureImplicit);
  EXPECT_EQ(status_of(blocking), cudaStreamCaptureStatusActive);
  EXPECT_EQ(cudaMemsetAsync(a.get(), 0, 64, nullptr), cudaErrorStreamCaptureImplicit);
  cudaGetLastError();
  expect_invalidated(blocking);
  // A non-blocking stream's capture leaves the legacy stream alone.
  TestStream nb(1);
  ASSERT_CUDA_OK(cudaStreamBeginCapture(nb.get(), cudaStreamCaptureModeGlobal));
  EXPECT_EQ(cudaMemsetAsync(a.get(), 0, 64, nullptr), cudaSuccess);
  cudaGraph_t graph;
  ASSERT_CUDA_OK(cudaStreamEndCapture(nb.get(), &graph));
  cudaGraphDestroy(graph);
  EXPECT_EQ(cudaStreamEndCapture(nb.get(), &graph), cudaErrorIllegalState);
  cudaGetLastError();
  cudaStreamDestroy(blocking);
  cudaSetDevice(0);
}

TEST(SimGraph, GraphMemoryIsReusedByEveryLaunchAndUnfreedAllocationsBlockARelaunch) {
  ASSERT_CUDA_OK(cudaSetDevice(0));
  const int n = 32;
  DeviceBuffer<float> out(0, n);
  TestStream s(0);
  // Freed in the graph: every launch allocates, uses and frees the same block.
  ASSERT_CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal));
  float* tmp = nullptr;
  ASSERT_CUDA_OK(cudaMallocAsync(reinterpret_cast<void**>(&tmp), n * sizeof(float), s.get()));
  launch_kernel(TD_KERNEL(fill_kernel), 1, 32, 0, s.get(), tmp, 2.f, n);
  launch_kernel(TD_KERNEL(axpy_kernel), 1, 32, 0, s.get(), 1.f, tmp, out.get(), n);
  ASSERT_CUDA_OK(cudaFreeAsync(tmp, s.get()));
  cudaGraph_t graph;
  ASSERT_CUDA_OK(cudaStreamEndCapture(s.get(), &graph));
  EXPECT_EQ(node_types(graph), (std::vector<cudaGraphNodeType>{cudaGraphNodeTypeMemAlloc, cudaGraphNodeTypeKernel,
                                                               cudaGraphNodeTypeKernel, cudaGraphNodeTypeMemFree}));
  cudaGraphExec_t exec, second;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  EXPECT_EQ(cudaGraphInstantiate(&second, graph, 0), cudaErrorInvalidValue);  // one executable graph at a time
  cudaGetLastError();
  ASSERT_CUDA_OK(cudaMemsetAsync(out.get(), 0, n * sizeof(float), s.get()));
  for (int i = 0; i < 3; ++i) ASSERT_CUDA_OK(cudaGraphLaunch(exec, s.get()));
  ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
  EXPECT_EQ(out.download(), std::vector<float>(n, 6.f));
  // Outside the graph that block is freed memory.
  EXPECT_EQ(cudaFreeAsync(tmp, s.get()), cudaErrorInvalidValue);
  cudaGetLastError();
  ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
  ASSERT_CUDA_OK(cudaGraphDestroy(graph));

  // Not freed in the graph: the allocation outlives the launch, and a relaunch needs it freed first.
  for (bool auto_free : {false, true}) {
    ASSERT_CUDA_OK(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal));
    ASSERT_CUDA_OK(cudaMallocAsync(reinterpret_cast<void**>(&tmp), n * sizeof(float), s.get()));
    launch_kernel(TD_KERNEL(fill_kernel), 1, 32, 0, s.get(), tmp, 7.f, n);
    ASSERT_CUDA_OK(cudaStreamEndCapture(s.get(), &graph));
    ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, auto_free ? cudaGraphInstantiateFlagAutoFreeOnLaunch : 0));
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, s.get()));
    launch_kernel(TD_KERNEL(axpy_kernel), 1, 32, 0, s.get(), 1.f, tmp, out.get(), n);  // after the launch: usable
    if (auto_free) {
      EXPECT_EQ(cudaGraphLaunch(exec, s.get()), cudaSuccess);
    } else {
      EXPECT_EQ(cudaGraphLaunch(exec, s.get()), cudaErrorInvalidValue);
      cudaGetLastError();
      ASSERT_CUDA_OK(cudaFreeAsync(tmp, s.get()));
      EXPECT_EQ(cudaGraphLaunch(exec, s.get()), cudaSuccess);
    }
    ASSERT_CUDA_OK(cudaFreeAsync(tmp, s.get()));
    ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
    EXPECT_EQ(out.download(), std::vector<float>(n, auto_free ? 20.f : 13.f));
    ASSERT_CUDA_OK(cudaGraphExecDestroy(exec));
    ASSERT_CUDA_OK(cudaGraphDestroy(graph));
  }
}

TEST(SimGraph, ExecUpdateTakesTheParametersOfATopologicallyIdenticalGraph) {
  ASSERT_CUDA_OK(cudaSetDevice(0));
  const int n = 16;
  DeviceBuffer<float> y(0, n);
  TestStream s(0);
  auto capture = [&](float value, int kernels) {
    cudaGraph_t graph = nullptr;
    EXPECT_EQ(cudaStreamBeginCapture(s.get(), cudaStreamCaptureModeGlobal), cudaSuccess);
    for (int k = 0; k < kernels; ++k) launch_kernel(TD_KERNEL(fill_kernel), 1, 16, 0, s.get(), y.get(), value, n);
    EXPECT_EQ(cudaStreamEndCapture(s.get(), &graph), cudaSuccess);
    return graph;
  };
  cudaGraph_t g2 = capture(2.f, 1), g3 = capture(3.f, 1), g4 = capture(4.f, 2);
  cudaGraphExec_t exec;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, g2, 0));
  cudaGraphExecUpdateResultInfo info;
  ASSERT_CUDA_OK(cudaGraphExecUpdate(exec, g3, &info));
  EXPECT_EQ(info.result, cudaGraphExecUpdateSuccess);
  ASSERT_CUDA_OK(cudaGraphLaunch(exec, s.get()));
  ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
  EXPECT_EQ(y.download(), std::vector<float>(n, 3.f));
  EXPECT_EQ(cudaGraphExecUpdate(exec, g4, &info), cudaErrorGraphExecUpdateFailure);
  EXPECT_EQ(info.result, cudaGraphExecUpdateErrorTopologyChanged);
  cudaGetLastError();
  ASSERT_CUDA_OK(cudaGraphLaunch(exec, s.get()));  // still the updated graph
  ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
  EXPECT_EQ(y.download(), std::vector<float>(n, 3.f));
  cudaGraphExecDestroy(exec);
  for (cudaGraph_t g : {g2, g3, g4}) cudaGraphDestroy(g);
}

TEST(SimGraph, LaunchesOfOneExecutableGraphRunOneAfterAnotherAcrossStreams) {
  ASSERT_CUDA_OK(cudaSetDevice(0));
  DeviceBuffer<float> y(0, 4);
  TestStream s0(0), s1(0), s2(0);
  ASSERT_CUDA_OK(cudaStreamBeginCapture(s0.get(), cudaStreamCaptureModeGlobal));
  launch_kernel(TD_KERNEL(fill_kernel), 1, 4, 0, s0.get(), y.get(), 1.f, 4);
  cudaGraph_t graph;
  ASSERT_CUDA_OK(cudaStreamEndCapture(s0.get(), &graph));
  cudaGraphExec_t exec;
  ASSERT_CUDA_OK(cudaGraphInstantiate(&exec, graph, 0));
  {
    StreamGate gate(s1.get());
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, s1.get()));
    ASSERT_CUDA_OK(cudaGraphLaunch(exec, s2.get()));
    std::this_thread::sleep_for(std::chrono::milliseconds(30));
    EXPECT_EQ(cudaStreamQuery(s2.get()), cudaErrorNotReady) << "the second launch ran before the first";
    gate.open();
  }
  ASSERT_CUDA_OK(cudaStreamSynchronize(s2.get()));
  EXPECT_EQ(y.download(), std::vector<float>(4, 1.f));
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
}

}  // namespace
