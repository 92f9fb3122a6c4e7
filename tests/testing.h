// Shared test helpers: GPU skipping, random inputs, tensor comparison, and the stream checker for a scope.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/device.h"
#include "runtime/rng.h"
#include "runtime/tensor.h"

// Skips the test (never passes it) when no CUDA GPU is usable.
#define TD_REQUIRE_GPU()                                                                     \
  do {                                                                                       \
    if (!::tandem::cuda_available())                                                         \
      GTEST_SKIP() << "no CUDA GPU: " << ::tandem::cuda_unavailable_reason();               \
  } while (0)

// Skips the test unless at least `n` CUDA GPUs are usable.
#define TD_REQUIRE_GPUS(n)                                                                           \
  do {                                                                                               \
    TD_REQUIRE_GPU();                                                                                \
    if (::tandem::cuda_device_count() < (n))                                                         \
      GTEST_SKIP() << "needs " << (n) << " GPUs, this machine has " << ::tandem::cuda_device_count(); \
  } while (0)

namespace tandem {
namespace testing {

// A fresh seed per call (from the test's name, a counter and a per-process base seed that is random unless
// TANDEM_TEST_SEED sets it; the base is printed, so a failing run can be repeated with the same inputs).
uint64_t fresh_seed();

// Largest |a - b| / max(1, |b|) over all elements (after converting both to f64 on the host).
double max_rel_error(const Tensor& a, const Tensor& b);

// EXPECT that a and b have the same shape and agree within `tol` (relative, see max_rel_error).
void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what = "");

// EXPECT bitwise equality of two tensors' elements (same dtype and shape).
void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what = "");

// TF32 and deterministic mode (runtime/config.h) as given while in scope, as they were after.
class NumericsGuard {
 public:
  NumericsGuard(bool tf32, bool deterministic_mode);
  ~NumericsGuard();
  NumericsGuard(const NumericsGuard&) = delete;
  NumericsGuard& operator=(const NumericsGuard&) = delete;

 private:
  bool tf32_, deterministic_;
};

// The stream checker on while in scope, and off (forgetting what it saw) after.
class StreamCheckOn {
 public:
  StreamCheckOn();
  ~StreamCheckOn();
  StreamCheckOn(const StreamCheckOn&) = delete;
  StreamCheckOn& operator=(const StreamCheckOn&) = delete;
};

}  // namespace testing
}  // namespace tandem
