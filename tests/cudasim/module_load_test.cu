// Module loading on the simulated GPU, as the driver does it (and as the first real GPU run met it): creating a
// cuBLAS or cuDNN handle, and a kernel's first launch, load a module into the device's context, which waits until
// every stream of the device is idle. A stream held by a host function that the same thread releases later is
// then a hang on a GPU; the simulator's watchdog (1 s here) turns it into a fault that names what waits and for
// which stream. A kernel loaded beforehand (cudaFuncGetAttributes) and a handle made beforehand wait for nothing.
#include <cublas_v2.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <string>
#include <thread>

#include "kernels/cuda/kernel_launch.cuh"
#include "tests/cudasim/sim_testing.h"

namespace {

using tandem::cuda::launch_kernel;
using namespace cudasim_testing;

// Before the simulator reads its configuration (at the first CUDA call).
const bool kConfigured = [] {
  setenv("TANDEM_CUDASIM_WATCHDOG_S", "1", 1);
  setenv("TANDEM_CUDASIM_DEVICES", "8", 1);
  return true;
}();

__global__ void fill_kernel(float* out, float value) { out[threadIdx.x] = value; }
__global__ void loaded_first_kernel(float* out, float value) { out[threadIdx.x] = value; }

// What the watchdog's fault says (the text of the device's sticky error).
std::string fault_text() { return cudaGetErrorString(cudaErrorLaunchTimeout); }

TEST(ModuleLoad, CublasCreateWhileAHostFunctionHoldsAStreamFaultsNamingTheWait) {
  ASSERT_TRUE(kConfigured);
  const int d = fresh_fault_device();
  TestStream s(d);
  StreamGate gate(s.get());
  cublasHandle_t h = nullptr;
  EXPECT_EQ(cublasCreate(&h), CUBLAS_STATUS_NOT_INITIALIZED);
  const std::string text = fault_text();
  EXPECT_TRUE(contains(text, "cuda:" + std::to_string(d) + ": cublasCreate waits for every stream of cuda:" +
                                 std::to_string(d) + " to become idle"))
      << text;
  EXPECT_TRUE(contains(text, "(running cudaLaunchHostFunc, 1 task(s) left)")) << text;
  EXPECT_TRUE(contains(text, "TANDEM_CUDASIM_WATCHDOG_S")) << text;
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorLaunchTimeout);  // the device's context is lost
}

TEST(ModuleLoad, CudnnCreateWhileAHostFunctionHoldsAStreamFaultsNamingTheWait) {
  const int d = fresh_fault_device();
  TestStream s(d);
  StreamGate gate(s.get());
  cudnnHandle_t h = nullptr;
  EXPECT_EQ(cudnnCreate(&h), CUDNN_STATUS_NOT_INITIALIZED);
  const std::string text = fault_text();
  EXPECT_TRUE(contains(text, "cuda:" + std::to_string(d) + ": cudnnCreate waits for every stream")) << text;
  EXPECT_TRUE(contains(text, "running cudaLaunchHostFunc")) << text;
}

TEST(ModuleLoad, AKernelsFirstLaunchWhileAHostFunctionHoldsAStreamFaultsNamingTheKernel) {
  const int d = fresh_fault_device();
  DeviceBuffer<float> out(d, 32);
  TestStream held(d);
  StreamGate gate(held.get());
  launch_kernel(TD_KERNEL(fill_kernel), 1, 32, 0, out.stream(), out.get(), 1.f);
  EXPECT_EQ(cudaGetLastError(), cudaErrorLaunchTimeout);
  const std::string text = fault_text();
  EXPECT_TRUE(contains(text, "the first launch of kernel fill_kernel at ")) << text;
  EXPECT_TRUE(contains(text, "module_load_test")) << text;  // where it is launched
  EXPECT_TRUE(contains(text, "running cudaLaunchHostFunc")) << text;
}

// A kernel loaded and a handle made before the stream is held wait for nothing; the held stream's own later work
// still waits for the gate.
TEST(ModuleLoad, WhatIsLoadedAndMadeBeforeAStreamIsHeldRunsWhileItIsHeld) {
  const int d = 0;
  ASSERT_CUDA_OK(cudaSetDevice(d));
  cudaFuncAttributes attributes;
  ASSERT_CUDA_OK(cudaFuncGetAttributes(&attributes, reinterpret_cast<const void*>(&loaded_first_kernel)));
  EXPECT_EQ(attributes.maxThreadsPerBlock, 1024);
  cublasHandle_t blas = nullptr;
  ASSERT_EQ(cublasCreate(&blas), CUBLAS_STATUS_SUCCESS);
  DeviceBuffer<float> out(d, 32), late(d, std::vector<float>(32, 0.f));
  TestStream held(d);
  {
    StreamGate gate(held.get());
    launch_kernel(TD_KERNEL(loaded_first_kernel), 1, 32, 0, held.get(), late.get(), 3.f);  // behind the gate
    launch_kernel(TD_KERNEL(loaded_first_kernel), 1, 32, 0, out.stream(), out.get(), 2.f);
    ASSERT_CUDA_OK(cudaGetLastError());
    ASSERT_EQ(cublasSetStream(blas, out.stream()), CUBLAS_STATUS_SUCCESS);
    ASSERT_CUDA_OK(cudaStreamSynchronize(out.stream()));
    EXPECT_EQ(cudaStreamQuery(held.get()), cudaErrorNotReady);
  }
  EXPECT_EQ(out.download(), std::vector<float>(32, 2.f));
  EXPECT_EQ(late.download(), std::vector<float>(32, 3.f));
  EXPECT_EQ(cublasDestroy(blas), CUBLAS_STATUS_SUCCESS);
}

// A busy stream that is not held only delays a load: the handle comes once the stream's work has run.
TEST(ModuleLoad, AHandleIsMadeOnceTheStreamsQueuedWorkHasRun) {
  const int d = 1;
  TestStream s(d);
  static std::atomic<bool> ran{false};
  ran = false;
  ASSERT_CUDA_OK(cudaLaunchHostFunc(
      s.get(),
      [](void*) {
        std::this_thread::sleep_for(std::chrono::milliseconds(300));
        ran = true;
      },
      nullptr));
  cudnnHandle_t h = nullptr;
  ASSERT_EQ(cudnnCreate(&h), CUDNN_STATUS_SUCCESS);
  EXPECT_TRUE(ran.load()) << "cudnnCreate returned before the stream's queued work had run";
  EXPECT_EQ(cudnnDestroy(h), CUDNN_STATUS_SUCCESS);
}

}  // namespace
