// Helpers of the simulator's own tests: seeds and random values, a held stream, device buffers with a stream of
// their device, library handles on a device, a device per fault (a fault loses its device's context for good), TF32
// from its definition, checks that print the simulator's texts, kernels loaded before the tests, and the
// simulator's test hooks.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <thread>
#include <utility>
#include <vector>

extern "C" {
unsigned long long tandem_cudasim_sm_blocks(int device, int sm);
void tandem_cudasim_set_thread_order(int order);
unsigned long long tandem_cudasim_pageable_copies(void);
}

#define ASSERT_CUDA_OK(expr)                                                     \
  do {                                                                           \
    const cudaError_t td_e_ = (expr);                                            \
    ASSERT_EQ(td_e_, cudaSuccess) << #expr << ": " << cudaGetErrorString(td_e_); \
  } while (0)

#define ASSERT_NCCL_OK(expr)                                                                                          \
  do {                                                                                                                \
    const ncclResult_t td_r_ = (expr);                                                                                \
    ASSERT_EQ(td_r_, ncclSuccess) << #expr << ": " << ncclGetErrorString(td_r_) << ": " << ncclGetLastError(nullptr); \
  } while (0)

namespace cudasim_testing {

// A seed per call: TANDEM_TEST_SEED, or random; the base is printed so that a failure can be repeated.
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

inline std::mt19937_64 rng() { return std::mt19937_64(fresh_seed()); }

// n values uniform in [-1, 1).
template <typename T>
std::vector<T> uniform(size_t n, std::mt19937_64& g) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(g));
  return v;
}

// TF32 from its definition: the float rounded to 11 significant bits, to nearest, ties away from zero.
inline double tf32(float f) {
  if (!std::isfinite(f) || f == 0) return f;
  int e;
  const double m = std::frexp(static_cast<double>(f), &e);  // f = m * 2^e, 0.5 <= |m| < 1
  return std::ldexp(std::round(std::ldexp(m, 11)), e - 11);
}

// A call that must succeed, in a helper that cannot return through ASSERT.
inline void expect_ok(cudaError_t e, const char* what) {
  EXPECT_EQ(e, cudaSuccess) << what << ": " << cudaGetErrorString(e);
}

inline bool contains(const std::string& text, const std::string& part) { return text.find(part) != std::string::npos; }

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

// Loads `kernels` on every simulated device before the tests run, as a program loads its kernels before any stream
// can wait for it: a kernel's first launch loads it, which waits for every stream of its device, so a test that
// holds a stream and then launches a kernel for the first time would hang there, as on a GPU (module_load_test).
// A file registers it with testing::AddGlobalTestEnvironment.
class KernelsLoaded : public ::testing::Environment {
 public:
  explicit KernelsLoaded(std::vector<const void*> kernels) : kernels_(std::move(kernels)) {}
  void SetUp() override {
    int count = 0;
    ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
    for (int d = 0; d < count; ++d) {
      ASSERT_EQ(cudaSetDevice(d), cudaSuccess);
      for (const void* fn : kernels_) {
        cudaFuncAttributes attributes;
        ASSERT_EQ(cudaFuncGetAttributes(&attributes, fn), cudaSuccess);
      }
    }
    ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  }

 private:
  std::vector<const void*> kernels_;
};
template <typename... K>
std::vector<const void*> functions(K... kernels) {
  return {reinterpret_cast<const void*>(kernels)...};
}

// A new stream of cuda:`device` (left current) in *stream, for a test that hands it to a handle of another device.
inline void create_stream_on(int device, cudaStream_t* stream) {
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_GT(count, device) << "TANDEM_CUDASIM_DEVICES";
  ASSERT_EQ(cudaSetDevice(device), cudaSuccess);
  ASSERT_EQ(cudaStreamCreate(stream), cudaSuccess);
}

// A non-blocking stream of one device.
class TestStream {
 public:
  explicit TestStream(int device) {
    expect_ok(cudaSetDevice(device), "cudaSetDevice");
    expect_ok(cudaStreamCreateWithFlags(&s_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
  }
  ~TestStream() { cudaStreamDestroy(s_); }
  TestStream(const TestStream&) = delete;
  TestStream& operator=(const TestStream&) = delete;
  cudaStream_t get() const { return s_; }

 private:
  cudaStream_t s_ = nullptr;
};

// Holds a stream at a host function until open() lets it go on, so that a test can look at the stream's later
// work before it runs. The destructor opens it too and waits for the stream. The flag is never freed: on a device
// that a test faulted on purpose the synchronize returns at once, while the host function may still read it.
class StreamGate {
 public:
  explicit StreamGate(cudaStream_t s) : s_(s), open_(new std::atomic<bool>(false)) {
    expect_ok(cudaLaunchHostFunc(s, &StreamGate::hold, open_), "cudaLaunchHostFunc");
  }
  ~StreamGate() {
    open();
    cudaStreamSynchronize(s_);
  }
  StreamGate(const StreamGate&) = delete;
  StreamGate& operator=(const StreamGate&) = delete;
  void open() { *open_ = true; }

 private:
  static void CUDART_CB hold(void* open) {
    while (!*static_cast<std::atomic<bool>*>(open)) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  cudaStream_t s_;
  std::atomic<bool>* open_;
};

// cudaMalloc memory of n elements on a device (made current), filled with `values` when given, and a stream of
// that device for the test's work (made on first use). The destructor's calls may fail on a device a test
// lost on purpose; that is expected.
template <typename T>
class DeviceBuffer {
 public:
  DeviceBuffer(int device, size_t n) : device_(device), n_(n) {
    expect_ok(cudaSetDevice(device), "cudaSetDevice");
    expect_ok(cudaMalloc(reinterpret_cast<void**>(&ptr_), n * sizeof(T)), "cudaMalloc");
  }
  DeviceBuffer(int device, const std::vector<T>& values) : DeviceBuffer(device, values.size()) { upload(values); }
  explicit DeviceBuffer(size_t n) : DeviceBuffer(current(), n) {}
  explicit DeviceBuffer(const std::vector<T>& values) : DeviceBuffer(current(), values) {}
  ~DeviceBuffer() {
    cudaSetDevice(device_);
    cudaFree(ptr_);
    if (stream_ != nullptr) cudaStreamDestroy(stream_);
    cudaGetLastError();
  }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;

  T* get() const { return ptr_; }
  template <typename U>
  U* as() const {
    return reinterpret_cast<U*>(ptr_);
  }
  size_t size() const { return n_; }
  cudaStream_t stream() {
    if (stream_ == nullptr) {
      expect_ok(cudaSetDevice(device_), "cudaSetDevice");
      expect_ok(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreateWithFlags");
    }
    return stream_;
  }
  void upload(const void* host) {
    expect_ok(cudaSetDevice(device_), "cudaSetDevice");
    expect_ok(cudaMemcpy(ptr_, host, n_ * sizeof(T), cudaMemcpyHostToDevice), "cudaMemcpy to the device");
  }
  void upload(const std::vector<T>& values) {
    ASSERT_EQ(values.size(), n_);
    upload(static_cast<const void*>(values.data()));
  }
  // The values once everything queued on the device so far has run (kernels may use another buffer's stream).
  std::vector<T> download() const {
    std::vector<T> out(n_);
    expect_ok(cudaSetDevice(device_), "cudaSetDevice");
    expect_ok(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    expect_ok(cudaMemcpy(out.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost), "cudaMemcpy to the host");
    return out;
  }

 private:
  static int current() {
    int d = 0;
    cudaGetDevice(&d);
    return d;
  }
  int device_;
  size_t n_;
  T* ptr_ = nullptr;
  cudaStream_t stream_ = nullptr;
};

inline unsigned long long sm_blocks(int device, int sm) { return tandem_cudasim_sm_blocks(device, sm); }

// Runs the kernels launched in scope with the runnable threads in `order` (0 forward, 1 reverse, 2 random).
struct ThreadOrderGuard {
  explicit ThreadOrderGuard(int order) { tandem_cudasim_set_thread_order(order); }
  ~ThreadOrderGuard() { tandem_cudasim_set_thread_order(-1); }
};

// The device handles of a library test (cuBLAS, cuDNN): cuda:`device` current, a stream and a library handle
// bound to it; back on cuda:0 at the end.
template <typename Handle, typename Status, Status (*create)(Handle*), Status (*set_stream)(Handle, cudaStream_t),
          Status (*destroy)(Handle), Status ok>
struct LibraryOnDevice {
  Handle handle = nullptr;
  cudaStream_t stream = nullptr;
  explicit LibraryOnDevice(int device = 0) {
    EXPECT_EQ(cudaSetDevice(device), cudaSuccess);
    EXPECT_EQ(cudaStreamCreate(&stream), cudaSuccess);
    EXPECT_EQ(create(&handle), ok);
    EXPECT_EQ(set_stream(handle, stream), ok);
  }
  ~LibraryOnDevice() {
    destroy(handle);
    cudaStreamDestroy(stream);
    cudaSetDevice(0);
  }
  LibraryOnDevice(const LibraryOnDevice&) = delete;
  LibraryOnDevice& operator=(const LibraryOnDevice&) = delete;
};

// A library handle (cuBLAS, cuDNN) holds device memory: handles are made on cuda:2 until creation fails with
// `alloc_failed`, each takes memory, and destroying them all gives every byte back.
template <typename Handle, typename Status>
void expect_handles_hold_device_memory(Status (*create)(Handle*), Status (*destroy)(Handle), Status ok,
                                       Status alloc_failed) {
  ASSERT_EQ(cudaSetDevice(2), cudaSuccess);
  size_t free0 = 0, free1 = 0, total = 0;
  ASSERT_EQ(cudaMemGetInfo(&free0, &total), cudaSuccess);
  std::vector<Handle> handles;
  Status st = ok;
  while (handles.size() < 100000) {
    Handle h;
    st = create(&h);
    if (st != ok) break;
    if (handles.empty()) {
      ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
      EXPECT_LT(free1, free0) << "a handle holds no device memory";
    }
    handles.push_back(h);
  }
  EXPECT_EQ(st, alloc_failed);
  EXPECT_LE(handles.size(), total / (free0 - free1));
  for (Handle h : handles) EXPECT_EQ(destroy(h), ok);
  ASSERT_EQ(cudaMemGetInfo(&free1, &total), cudaSuccess);
  EXPECT_EQ(free1, free0);
  cudaSetDevice(0);
}

}  // namespace cudasim_testing
