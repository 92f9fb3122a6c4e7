// The simulator's call counts (tandem_cudasim_call_count): each counted API call and kernel launch adds one under
// its name, and a stream-ordered allocation counts as pool growth until the pool holds a freed block that fits.
#include <cudnn.h>
#include <gtest/gtest.h>

#include <random>
#include <string>

#include "kernels/cuda/kernel_launch.cuh"
#include "tests/cudasim/sim_testing.h"

extern "C" unsigned long long tandem_cudasim_call_count(const char* name);

namespace {

using tandem::cuda::launch_kernel;
using namespace cudasim_testing;

__global__ void counted_kernel(int* out) { *out = 1; }

unsigned long long count(const std::string& name) { return tandem_cudasim_call_count(name.c_str()); }

TEST(CudasimCallCounts, CountsEachCallUnderItsName) {
  const unsigned long long set0 = count("cudaSetDevice"), get0 = count("cudaGetDevice");
  ASSERT_CUDA_OK(cudaSetDevice(0));
  ASSERT_CUDA_OK(cudaSetDevice(0));
  int device = -1;
  ASSERT_CUDA_OK(cudaGetDevice(&device));
  EXPECT_EQ(count("cudaSetDevice") - set0, 2u);
  EXPECT_EQ(count("cudaGetDevice") - get0, 1u);
  EXPECT_EQ(count("no such call"), 0u);
  EXPECT_EQ(tandem_cudasim_call_count(nullptr), 0u);

  const unsigned long long tensors0 = count("cudnnCreateTensorDescriptor"),
                           convs0 = count("cudnnCreateConvolutionDescriptor");
  cudnnTensorDescriptor_t t[3];
  for (cudnnTensorDescriptor_t& d : t) ASSERT_EQ(cudnnCreateTensorDescriptor(&d), CUDNN_STATUS_SUCCESS);
  for (cudnnTensorDescriptor_t d : t) ASSERT_EQ(cudnnDestroyTensorDescriptor(d), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(count("cudnnCreateTensorDescriptor") - tensors0, 3u);
  EXPECT_EQ(count("cudnnCreateConvolutionDescriptor") - convs0, 0u);

  TestStream s(0);
  int* out = nullptr;
  const unsigned long long launches0 = count("kernel counted_kernel");
  ASSERT_CUDA_OK(cudaMallocAsync(reinterpret_cast<void**>(&out), sizeof(int), s.get()));
  for (int i = 0; i < 4; ++i) launch_kernel(TD_KERNEL(counted_kernel), 1, 1, 0, s.get(), out);
  ASSERT_CUDA_OK(cudaFreeAsync(out, s.get()));
  ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
  EXPECT_EQ(count("kernel counted_kernel") - launches0, 4u);
}

// A block freed on a stream serves the next allocation of a size it fits on that stream (no growth); one of
// more than twice a cached block's size, or bigger than any, takes new memory.
TEST(CudasimCallCounts, PoolGrowthAndReuse) {
  TestStream s(0);
  std::mt19937_64 g = rng();
  const size_t bytes = 4096 + 512 * static_cast<size_t>(std::uniform_int_distribution<int>(0, 64)(g));
  const unsigned long long grown0 = count("pool growth"), reused0 = count("pool reuse"),
                           calls0 = count("cudaMallocAsync"), mallocs0 = count("cudaMalloc");
  void* a = nullptr;
  ASSERT_CUDA_OK(cudaMallocAsync(&a, bytes, s.get()));
  EXPECT_EQ(count("pool growth") - grown0, 1u);
  ASSERT_CUDA_OK(cudaFreeAsync(a, s.get()));
  void* b = nullptr;
  ASSERT_CUDA_OK(cudaMallocAsync(&b, bytes - 100, s.get()));
  EXPECT_EQ(b, a) << "the freed block should be reused";
  EXPECT_EQ(count("pool growth") - grown0, 1u);
  EXPECT_EQ(count("pool reuse") - reused0, 1u);
  void* c = nullptr;
  ASSERT_CUDA_OK(cudaMallocAsync(&c, 4 * bytes, s.get()));  // b is still held: nothing cached fits
  EXPECT_EQ(count("pool growth") - grown0, 2u);
  void* none = &none;
  ASSERT_CUDA_OK(cudaMallocAsync(&none, 0, s.get()));  // 0 bytes: no allocation, neither outcome
  EXPECT_EQ(count("pool growth") - grown0, 2u);
  EXPECT_EQ(count("pool reuse") - reused0, 1u);
  EXPECT_EQ(count("cudaMallocAsync") - calls0, 4u);
  ASSERT_CUDA_OK(cudaFreeAsync(b, s.get()));
  ASSERT_CUDA_OK(cudaFreeAsync(c, s.get()));
  ASSERT_CUDA_OK(cudaStreamSynchronize(s.get()));
  EXPECT_EQ(count("cudaMalloc") - mallocs0, 0u);
  void* d = nullptr;
  ASSERT_CUDA_OK(cudaMalloc(&d, bytes));
  EXPECT_EQ(count("cudaMalloc") - mallocs0, 1u);
  ASSERT_CUDA_OK(cudaFree(d));
}

}  // namespace
