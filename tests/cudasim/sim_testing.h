// Helpers of the simulator's own tests: device buffers with their stream, fresh seeds, a device per fault
// (a fault loses its device's context for good), and the simulator's test hooks.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <vector>

extern "C" {
unsigned long long tandem_cudasim_sm_blocks(int device, int sm);
void tandem_cudasim_set_thread_order(int order);
unsigned long long tandem_cudasim_pageable_copies(void);
}

namespace cudasim_testing {

// A seed per call: TANDEM_TEST_SEED, or random; printed so that a failure can be repeated.
inline uint64_t fresh_seed() {
  static const uint64_t base = [] {
    const char* s = std::getenv("TANDEM_TEST_SEED");
    uint64_t b = s != nullptr ? std::strtoull(s, nullptr, 10) : std::random_device{}();
    std::printf("TANDEM_TEST_SEED=%llu\n", static_cast<unsigned long long>(b));
    return b;
  }();
  static std::atomic<uint64_t> counter{0};
  return base * 1000003u + counter++;
}

// A device no other test uses: faults are sticky, so each fault test takes one (the test targets ask for
// enough simulated devices).
inline int fresh_fault_device() {
  static std::atomic<int> next{4};
  int count = 0;
  cudaGetDeviceCount(&count);
  const int d = next++;
  if (d >= count) {
    ADD_FAILURE() << "not enough simulated devices for the fault tests (TANDEM_CUDASIM_DEVICES=" << count << ")";
    return count - 1;
  }
  return d;
}

// Memory of `device` holding `values`, and a stream of that device; the device stays current.
template <typename T>
struct DeviceBuffer {
  int device;
  cudaStream_t stream = nullptr;
  T* ptr = nullptr;
  size_t n;
  DeviceBuffer(int d, const std::vector<T>& values) : device(d), n(values.size()) {
    EXPECT_EQ(cudaSetDevice(d), cudaSuccess);
    EXPECT_EQ(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), cudaSuccess);
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&ptr), n * sizeof(T)), cudaSuccess);
    EXPECT_EQ(cudaMemcpyAsync(ptr, values.data(), n * sizeof(T), cudaMemcpyHostToDevice, stream), cudaSuccess);
  }
  // The values once everything queued on the device so far has run (kernels may use another buffer's stream).
  std::vector<T> read() {
    EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
    EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    std::vector<T> out(n);
    EXPECT_EQ(cudaMemcpyAsync(out.data(), ptr, n * sizeof(T), cudaMemcpyDeviceToHost, stream), cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
    return out;
  }
  ~DeviceBuffer() {
    cudaSetDevice(device);
    cudaFree(ptr);
    cudaStreamDestroy(stream);
    cudaGetLastError();  // a fault test's device refuses these; that is expected
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
};

inline unsigned long long sm_blocks(int device, int sm) { return tandem_cudasim_sm_blocks(device, sm); }

// Runs the kernels launched in scope with the runnable threads in `order` (0 forward, 1 reverse, 2 random).
struct ThreadOrderGuard {
  explicit ThreadOrderGuard(int order) { tandem_cudasim_set_thread_order(order); }
  ~ThreadOrderGuard() { tandem_cudasim_set_thread_order(-1); }
};

}  // namespace cudasim_testing
