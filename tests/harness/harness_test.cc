// The harness's checkers fed the bugs they are for: a backward scaled by 1.01 (by the OpCase gradient check,
// the tensor-function form and the probing, kink-skipping form), a forward off by 1e-3 and an op that writes
// its input, one that leaves an output element unwritten, and kernels that write an operand their method
// declares read-only or leave one it declares written untouched.
#include <gtest/gtest-spi.h>
#include <gtest/gtest.h>

#include <cstdint>

#include "kernels/cpu/cpu_backend.h"
#include "runtime/base/config.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/harness/gradient_check.h"
#include "tests/harness/op_harness.h"
#include "tests/harness/write_check.h"

namespace tandem {
namespace testing {
namespace {

// x * 1.01 - detach(x) * 0.01: the identity forward (to rounding), with a gradient 1.01 times too large.
Tensor scaled_backward(const Tensor& x) { return add(mul(x, 1.01), mul(x.detach(), -0.01)); }

OpCase identity_case(bool wrong_gradient) {
  return make_case(
      wrong_gradient ? "scaled_backward" : "identity", {float_in({3, 4})},
      [wrong_gradient](const TV& in, DType) { return TV{wrong_gradient ? scaled_backward(in[0]) : mul(in[0], 1.0)}; },
      [](const HV& in) { return HV{in[0]}; });
}

TEST(GradientCheck, OpCaseWithRightGradientPasses) {
  check_forward(identity_case(false), DType::F64);
  check_gradient(identity_case(false));
}

TEST(GradientCheck, OpCaseWithScaledBackwardFails) {
  check_forward(identity_case(true), DType::F64);  // the forward is right
  EXPECT_NONFATAL_FAILURE(check_gradient(identity_case(true)), "finite difference");
}

TEST(GradientCheck, TensorFunctionWithScaledBackwardFails) {
  static Tensor x;
  Generator gen(fresh_seed());
  x = randn({2, 5}, gen, TensorOptions(DType::F64).with_device(Device::cpu())).set_requires_grad();
  expect_gradients_match([](const TV& in) { return mul(in[0], in[0]); }, {x});
  EXPECT_NONFATAL_FAILURE(expect_gradients_match([](const TV& in) { return mul(scaled_backward(in[0]), in[0]); }, {x}),
                          "finite difference");
}

// relu(x) with one probe within a step of its kink: skipped, so the check passes; a gradient scaled by 1.01 is
// still caught by the other probes; without skipping, the kink's probe fails.
TEST(GradientCheck, KinkSkippingStillCatchesAScaledBackward) {
  Generator gen(fresh_seed());
  std::vector<double> v(64);
  for (double& e : v) e = 0.1 + gen.uniform();
  v[0] = 1e-7;
  static Tensor x;
  x = from_vector<double>(v, {64}, Device::cpu()).set_requires_grad();
  static GradientCheck skipping, plain;
  skipping.max_probes = plain.max_probes = 16;
  skipping.skip_kinks = true;
  expect_gradients_match([] { return sum(relu(x)); }, {{"x", x}}, skipping);
  EXPECT_NONFATAL_FAILURE(expect_gradients_match([] { return sum(relu(scaled_backward(x))); }, {{"x", x}}, skipping),
                          "finite difference");
  EXPECT_NONFATAL_FAILURE(expect_gradients_match([] { return sum(relu(x)); }, {{"x", x}}, plain), "finite difference");
}

TEST(ForwardCheck, WrongForwardFails) {
  static OpCase off = make_case(
      "off_by_1e-3", {float_in({3, 4})}, [](const TV& in, DType) { return TV{mul(in[0], 1.001)}; },
      [](const HV& in) { return HV{in[0]}; });
  EXPECT_NONFATAL_FAILURE(check_forward(off, DType::F64), "relative error");
  EXPECT_NONFATAL_FAILURE(check_forward(off, DType::F32), "relative error");
}

// An op that writes into its input: its output is right, the input check catches it.
TEST(ForwardCheck, OpWritingItsInputFails) {
  static OpCase writes = make_case(
      "writes_input", {float_in({3, 4})},
      [](const TV& in, DType) {
        Tensor x = in[0];
        x.fill_(1.0);
        return TV{x.clone()};
      },
      [](const HV& in) { return HV{ref::map(in[0], [](double) { return 1.0; })}; }, false);
  EXPECT_NONFATAL_FAILURE(check_forward(writes, DType::F64), "input 0 changed by the op");
}

// An op that leaves the last element of its output unwritten: fresh memory filled with NaN (TANDEM_FILL_FRESH, on
// in the test suite; the simulated GPU always fills) makes the forward check see it even where the host cache
// hands back the block of an earlier run of the same op, holding the right answer.
TEST(ForwardCheck, OutputElementLeftUnwrittenFails) {
  static OpCase lazy = make_case(
      "misses_last_element", {float_in({3, 4})},
      [](const TV& in, DType) {
        Tensor out = empty_like(in[0]);
        out.view({12}).narrow(0, 0, 11).copy_(in[0].view({12}).narrow(0, 0, 11));
        return TV{out};
      },
      [](const HV& in) { return HV{in[0]}; }, false);
  const bool was = fill_fresh_host_memory();
  set_fill_fresh_host_memory(true);
  EXPECT_NONFATAL_FAILURE(check_forward(lazy, DType::F64), "element 11 is");
  EXPECT_NONFATAL_FAILURE(check_forward(lazy, DType::F32), "element 11 is");
  set_fill_fresh_host_memory(was);
}

// The CPU kernels with two bugs a kernel's own output cannot show: unary also flips the first byte of its input x
// (UnaryArgs declares x read; zeroing it instead went unseen when that byte was 0 already), and softmax writes
// nothing of its output y.
class BuggyCpuKernels : public cpu::CpuBackend {
 public:
  void unary(const UnaryArgs& args, const Stream& s) override {
    cpu::CpuBackend::unary(args, s);
    if (args.n > 0) {
      auto* first = static_cast<uint8_t*>(const_cast<void*>(args.x));
      *first = static_cast<uint8_t>(~*first);
    }
  }
  void softmax(const SoftmaxArgs&, const Stream&) override {}
};

// Registers the buggy kernels for the CPU while in scope (with fresh host memory NaN-filled).
class BuggyCpu : NonCopyable {
 public:
  BuggyCpu() : real_(registered_backend(DeviceType::CPU)), fill_was_(fill_fresh_host_memory()) {
    register_backend(DeviceType::CPU, &buggy_);
    set_fill_fresh_host_memory(true);
  }
  ~BuggyCpu() {
    register_backend(DeviceType::CPU, real_);
    set_fill_fresh_host_memory(fill_was_);
  }

 private:
  BuggyCpuKernels buggy_;
  Backend* real_;
  bool fill_was_;
};

// Positive values (relu keeps them) in [0.5, 1.5).
Tensor fresh_input() {
  Generator gen(fresh_seed());
  std::vector<float> v(12);
  for (float& e : v) e = static_cast<float>(0.5 + gen.uniform());
  return from_vector<float>(v, {3, 4}, Device::cpu());
}

TEST(WriteCheck, KernelWritingAnOperandDeclaredReadFails) {
  BuggyCpu buggy;
  static Tensor x;
  x = fresh_input();
  EXPECT_NONFATAL_FAILURE(
      {
        WriteCheck check;
        relu(x);
      },
      "unary: x is declared read-only, but the kernel changed byte 0");
  // The op's result does not show the bug.
  Tensor in = fresh_input(), original = in.clone();
  expect_close(relu(in), original, 0.0, "relu of positive values");
}

TEST(WriteCheck, KernelLeavingADeclaredOutputUnwrittenFails) {
  BuggyCpu buggy;
  static Tensor x;
  x = fresh_input();
  EXPECT_NONFATAL_FAILURE(
      {
        WriteCheck check;
        softmax(x, 1);
      },
      "softmax: y is declared written, but the kernel left all 48 bytes of it as fresh memory");
}

TEST(WriteCheck, CorrectKernelsAndInPlaceOpsPass) {
  WriteCheck check;
  Tensor x = fresh_input();
  mul_(x, 2.0);  // unary with x and y the same memory: declared written, so its change is no failure
  Tensor y = softmax(relu(x), 1);
  EXPECT_EQ(y.numel(), 12);
}

// Through the op harness: its forward check wraps the kernels itself and names the method and operand.
TEST(WriteCheck, OpHarnessNamesTheKernelWritingItsInput) {
  BuggyCpu buggy;
  static OpCase c = make_case(
      "relu_of_positive", {float_in({3, 4}, positive())}, [](const TV& in, DType) { return TV{relu(in[0])}; },
      [](const HV& in) { return HV{in[0]}; }, false);
  ::testing::TestPartResultArray failures;
  {
    ::testing::ScopedFakeTestPartResultReporter reporter(
        ::testing::ScopedFakeTestPartResultReporter::INTERCEPT_ONLY_CURRENT_THREAD, &failures);
    check_forward(c, DType::F32);
  }
  bool named = false;
  for (int i = 0; i < failures.size(); ++i)
    named = named || std::string(failures.GetTestPartResult(i).message()).find("unary: x is declared read-only") !=
                         std::string::npos;
  EXPECT_TRUE(named) << failures.size() << " failures, none naming unary's operand x";
}

}  // namespace
}  // namespace testing
}  // namespace tandem
