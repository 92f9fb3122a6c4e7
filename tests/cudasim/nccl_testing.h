// Helpers of the simulated NCCL's tests: checks that print the simulator's texts, device buffers and streams
// on a chosen simulated device, and a printed seed per test.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <vector>

#define ASSERT_CUDA_OK(expr)                                                      \
  do {                                                                            \
    const cudaError_t td_e_ = (expr);                                             \
    ASSERT_EQ(td_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(td_e_); \
  } while (0)

#define ASSERT_NCCL_OK(expr)                                                                                \
  do {                                                                                                      \
    const ncclResult_t td_r_ = (expr);                                                                      \
    ASSERT_EQ(td_r_, ncclSuccess) << #expr << ": " << ncclGetErrorString(td_r_) << ": " << ncclGetLastError(nullptr); \
  } while (0)

namespace nccltest {

// A fresh seed, printed so that a failure can be repeated (TANDEM_TEST_SEED fixes it).
inline uint64_t fresh_seed() {
  const char* fixed = std::getenv("TANDEM_TEST_SEED");
  const uint64_t seed = fixed != nullptr ? std::strtoull(fixed, nullptr, 10) : std::random_device()();
  std::printf("seed %llu (TANDEM_TEST_SEED)\n", static_cast<unsigned long long>(seed));
  return seed;
}

// Calls that must succeed in a helper that cannot return through ASSERT.
inline void expect_ok(cudaError_t e, const char* what) {
  EXPECT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

// cudaMalloc memory of one device.
class Buffer {
 public:
  Buffer(int device, size_t bytes) : device_(device), bytes_(bytes) {
    expect_ok(cudaSetDevice(device), "cudaSetDevice");
    expect_ok(cudaMalloc(&ptr_, bytes), "cudaMalloc");
  }
  ~Buffer() {
    cudaSetDevice(device_);
    cudaFree(ptr_);  // fails on a device whose context a test lost on purpose: nothing to do about it
  }
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* get() const { return ptr_; }
  template <typename T>
  T* as() const {
    return static_cast<T*>(ptr_);
  }
  void upload(const void* host) {
    expect_ok(cudaSetDevice(device_), "cudaSetDevice");
    expect_ok(cudaMemcpy(ptr_, host, bytes_, cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  }
  std::vector<char> download() const {
    std::vector<char> host(bytes_);
    expect_ok(cudaSetDevice(device_), "cudaSetDevice");
    expect_ok(cudaMemcpy(host.data(), ptr_, bytes_, cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
    return host;
  }

 private:
  int device_;
  size_t bytes_;
  void* ptr_ = nullptr;
};

// A non-blocking stream of one device.
class Stream {
 public:
  explicit Stream(int device) {
    expect_ok(cudaSetDevice(device), "cudaSetDevice");
    expect_ok(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~Stream() { cudaStreamDestroy(s_); }
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// The text the simulator gives with a CUDA error code (its latest detail for that code).
inline std::string cuda_text(cudaError_t e) { return cudaGetErrorString(e); }

inline bool contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

}  // namespace nccltest
