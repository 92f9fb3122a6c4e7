// Shared test helpers: GPU skipping, random inputs, tensor comparison, expected errors, and the stream checker for
// a scope.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/non_copyable.h"
#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"

// Skips the test (never passes it) when no CUDA GPU is usable.
#define TD_REQUIRE_GPU()                                                                                     \
  do {                                                                                                       \
    if (!::tandem::cuda_available()) GTEST_SKIP() << "no CUDA GPU: " << ::tandem::cuda_unavailable_reason(); \
  } while (0)

// Skips the test unless at least `n` CUDA GPUs are usable.
#define TD_REQUIRE_GPUS(n)                                                                            \
  do {                                                                                                \
    TD_REQUIRE_GPU();                                                                                 \
    if (::tandem::cuda_device_count() < (n))                                                          \
      GTEST_SKIP() << "needs " << (n) << " GPUs, this machine has " << ::tandem::cuda_device_count(); \
  } while (0)

namespace tandem {
namespace testing {

// A fresh seed per call (from the test's name, a counter and a per-process base seed that is random unless
// TANDEM_TEST_SEED sets it; the base is printed, so a failing run can be repeated with the same inputs).
uint64_t fresh_seed();

// Whether this is a sanitizer run of the simulated GPU (the test command's ASan + UBSan run, or tools/tandem tsan:
// --config=cudasim-asan and cudasim-tsan set TANDEM_SANITIZED), where a few long tests run a part of what their
// plain simulated-GPU run covers.
bool sanitizer_run();

// How far `got` is from the reference `want`, for tolerances: the largest |got_i - want_i| divided by the largest
// finite |want_j| (the error relative to the reference's magnitude: an element near zero is held to the precision
// of its tensor, which is what rounding in a sum that cancels leaves it, and a tensor of small values is held to
// its own scale, not to an absolute 1). A non-finite reference element must be matched exactly (inf by the same
// inf, NaN by NaN); any other pairing with a non-finite value, a nonzero value against an all-zero reference, or
// a length mismatch is an infinite error.
struct Discrepancy {
  double error = 0;
  size_t at = 0;  // the element with the largest error
};
// With `scale` > 0 the errors are relative to it instead: for a tensor that is part of a larger whole (one
// parameter's gradient among a model's, one tensor of a block's weights), whose rounding errors are those of the
// whole's magnitude; a part that is mathematically zero (the gradient of a batch-norm bias that feeds a
// convolution and another train-mode batch norm) holds nothing else.
Discrepancy compare_values(const std::vector<double>& got, const std::vector<double>& want, double scale = 0);

// The largest finite |element| of t (0 for an empty or all-zero tensor).
double max_magnitude(const Tensor& t);

// compare_values of a (got) and b (want) after converting both to f64 on the host.
double max_rel_error(const Tensor& a, const Tensor& b, double scale = 0);

// EXPECT that a and b have the same shape and agree within `tol` (relative to b's magnitude, or to `scale`; see
// compare_values).
void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what = "", double scale = 0);

// EXPECT bitwise equality of two tensors' elements (same dtype and shape).
void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what = "");

// Random bf16 values of magnitude in [1/4, 4], negative too unless `positive`, as a bf16 tensor on `device`.
Tensor random_bf16(const Shape& shape, Generator& gen, Device device, bool positive = false);
// One step of bf16 (8 significant bits) at the magnitude of v (v != 0); of each element of t (0 where it is 0),
// as an f64 tensor on the CPU.
double bf16_step(double v);
Tensor bf16_steps(const Tensor& t);
// t rounded to bf16 as a bf16 result is stored (through f32, to nearest even).
Tensor bf16_rounded(const Tensor& t);
// The error bound of f32 accumulation given the sums of the terms' magnitudes: 2^-16 of each (up to 256 terms,
// each addition off by at most 2^-24 of the running magnitude).
Tensor f32_accumulation_slack(const Tensor& magnitude_sums);
// EXPECT got (bf16) within `steps` bf16 steps of want (any dtype, read as f64; a zero want needs a zero got)
// plus slack[i] (an f64 bound per element, e.g. for f32 accumulation; undefined: none), elementwise.
void expect_bf16_near(const Tensor& got, const Tensor& want, int steps, const Tensor& slack, const std::string& what);

// Runs fn: true, with the error's what() in *what, when it throws E; else a failure (another exception, or none)
// and false.
template <typename E, typename Fn>
bool throws_error(Fn&& fn, std::string* what) {
  try {
    fn();
  } catch (const E& e) {
    *what = e.what();
    return true;
  } catch (const std::exception& e) {
    ADD_FAILURE() << "threw the wrong type: " << e.what();
    return false;
  }
  ADD_FAILURE() << "nothing was thrown";
  return false;
}

// EXPECTs that fn throws E and returns its what() ("" if it did not).
template <typename E, typename Fn>
std::string error_of(Fn&& fn) {
  std::string what;
  throws_error<E>(fn, &what);
  return what;
}

#define EXPECT_MENTIONS(msg, part) EXPECT_NE((msg).find(part), std::string::npos) << "message: " << (msg)

// EXPECTs that fn throws E whose message contains every one of `parts`.
template <typename E, typename Fn>
void expect_error(Fn&& fn, const std::vector<std::string>& parts) {
  std::string what;
  if (!throws_error<E>(fn, &what)) return;
  for (const std::string& p : parts) EXPECT_MENTIONS(what, p);
}
// One part: a string (a braced list of parts goes to the overload above, since it cannot be deduced here).
template <typename E, typename Fn, typename Text,
          typename = std::enable_if_t<std::is_convertible<const Text&, std::string>::value>>
void expect_error(Fn&& fn, const Text& part) {
  expect_error<E>(fn, std::vector<std::string>{std::string(part)});
}

// TF32 and deterministic mode (runtime/base/config.h) as given while in scope, as they were after.
class NumericsGuard : NonCopyable {
 public:
  NumericsGuard(bool tf32, bool deterministic_mode);
  ~NumericsGuard();

 private:
  bool tf32_, deterministic_;
};

// The stream checker on while in scope, and off (forgetting what it saw) after.
class StreamCheckOn : NonCopyable {
 public:
  StreamCheckOn();
  ~StreamCheckOn();
};

}  // namespace testing
}  // namespace tandem
