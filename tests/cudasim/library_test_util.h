// Helpers of the simulated cuBLAS and cuDNN tests: printed random seeds, device buffers through the CUDA
// runtime API, and TF32 rounding written from its definition.
#pragma once

#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <functional>
#include <random>
#include <string>
#include <vector>

namespace cudasim_test {

// A generator per test: from TANDEM_TEST_SEED when set (else random, printed once) and the test's name.
inline std::mt19937_64 rng() {
  static const uint64_t base = [] {
    uint64_t s;
    if (const char* v = std::getenv("TANDEM_TEST_SEED")) {
      s = std::strtoull(v, nullptr, 0);
    } else {
      std::random_device rd;
      s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    std::printf("[cudasim] test inputs drawn with TANDEM_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  const std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "";
  return std::mt19937_64(base ^ std::hash<std::string>{}(name));
}

template <typename T>
std::vector<T> uniform(size_t n, std::mt19937_64& g) {
  std::uniform_real_distribution<double> d(-1.0, 1.0);
  std::vector<T> v(n);
  for (T& x : v) x = static_cast<T>(d(g));
  return v;
}

// Device memory of `count` elements on the current device (freed at scope exit).
template <typename T>
class DeviceBuffer {
 public:
  explicit DeviceBuffer(size_t count) : count_(count) {
    EXPECT_EQ(cudaMalloc(reinterpret_cast<void**>(&p_), count * sizeof(T)), cudaSuccess);
  }
  explicit DeviceBuffer(const std::vector<T>& v) : DeviceBuffer(v.size()) { upload(v); }
  ~DeviceBuffer() { cudaFree(p_); }
  DeviceBuffer(const DeviceBuffer&) = delete;
  DeviceBuffer& operator=(const DeviceBuffer&) = delete;
  T* get() const { return p_; }
  void upload(const std::vector<T>& v) {
    ASSERT_EQ(v.size(), count_);
    ASSERT_EQ(cudaMemcpy(p_, v.data(), count_ * sizeof(T), cudaMemcpyHostToDevice), cudaSuccess);
  }
  std::vector<T> download() const {
    std::vector<T> v(count_);
    EXPECT_EQ(cudaMemcpy(v.data(), p_, count_ * sizeof(T), cudaMemcpyDeviceToHost), cudaSuccess);
    return v;
  }

 private:
  T* p_ = nullptr;
  size_t count_;
};

// TF32 from its definition: the float rounded to 11 significant bits, to nearest, ties away from zero.
inline double tf32(float f) {
  if (!std::isfinite(f) || f == 0) return f;
  int e;
  const double m = std::frexp(static_cast<double>(f), &e);  // f = m * 2^e, 0.5 <= |m| < 1
  return std::ldexp(std::round(std::ldexp(m, 11)), e - 11);
}

}  // namespace cudasim_test
