// The op test harness: an OpCase describes one op call (inputs, the call, a double-precision reference);
// the checks run it forward against the reference in f32 and f64, check its gradients by central finite
// differences in f64 (tests/harness/gradient_check.h), and compare CUDA with the CPU when a GPU is present. Every
// kernel call of each check is held to the operands its method declares (tests/harness/write_check.h).
#pragma once

#include <functional>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"
#include "tests/harness/reference.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {

using ref::HostTensor;

// What an input tensor holds: floating values (the case's dtype), i64 indices, or a u8 mask.
enum class Role { Float, Int64, Mask };

// Draws n values for an input; `earlier` are the inputs drawn before it (for inputs whose values must
// keep away from, or share values with, another input's).
using Sampler = std::function<std::vector<double>(Generator& gen, int64_t n, const std::vector<HostTensor>& earlier)>;

Sampler normal_values(double stddev = 1.0);
Sampler uniform_values(double lo, double hi);
// Uniform in [lo, hi) with every value at least `gap` away from each of `points` (kinks such as 0 for relu).
Sampler avoiding(std::vector<double> points, double lo, double hi, double gap = 0.1);
Sampler away_from_zero(double lo = 0.2, double hi = 2.0);  // magnitude in [lo, hi), random sign
Sampler positive(double lo = 0.5, double hi = 2.0);
// Values pairwise at least 0.15 apart, in random order (a unique max for max/amax/argmax).
Sampler distinct_values();
// Uniform in [lo, hi) at least `gap` away from every value of input `k` (maximum/minimum of two inputs).
Sampler avoiding_input(int k, double lo = -2.0, double hi = 2.0, double gap = 0.1);
// About half the values copied from input k, the rest normal (so comparisons see equal elements).
Sampler sharing_input(int k);
// Multiples of `step` in [lo, hi): with a power-of-two step, values and their finite-difference neighbours
// (x +- step) exact in f32, for ops that round to f32.
Sampler grid_values(double step, double lo, double hi);
Sampler indices(int64_t bound);  // integers in [0, bound)
Sampler coin_flips();            // 0 or 1

struct InputSpec {
  Shape shape;
  Sampler sample;
  Role role = Role::Float;
  bool grad = true;            // Float inputs: whether the gradient check differentiates with respect to it
  bool channels_last = false;  // 4-D: made in the channels-last memory format (the op sees no conversion)
};
InputSpec float_in(Shape shape, Sampler sample = normal_values(), bool grad = true);
InputSpec in_channels_last(InputSpec s);  // s, made channels-last when it is 4-D
InputSpec index_in(Shape shape, int64_t bound);
InputSpec mask_in(Shape shape);

// The tensor lists ops and references take and return (short, for the case lists' lambdas).
using TV = std::vector<Tensor>;
using HV = std::vector<HostTensor>;
// Runs the op under test on `in` (float inputs of dtype `dtype`); returns all its outputs.
using OpFn = std::function<TV(const TV& in, DType dtype)>;
// The expected outputs from the inputs' values (floats exactly as the op sees them).
using RefFn = std::function<HV(const HV& in)>;
// The floating-point operations of one forward call, from its inputs' and outputs' shapes.
using FlopsFn = std::function<double(const std::vector<Shape>& in, const std::vector<Shape>& out)>;

struct OpCase {
  std::string name;  // the test name: letters, digits and underscores
  std::vector<InputSpec> inputs;
  OpFn run;
  RefFn reference;
  bool grad = true;        // check gradients (every float output must then require grad)
  double tol_f32 = 1e-5;   // forward tolerance in f32 (relative to the output's magnitude, see compare_values)
  double tol_f64 = 1e-12;  // the same in f64
  double fd_step = 1e-6;   // the finite differences' step in f64 (GradientCheck of gradient_check.h)
  // The benchmark mode (tests/harness/op_bench.h): the FLOPs of one forward call (unset: the case is counted by
  // its bytes alone, as a copy or a view).
  FlopsFn flops;
  // The inputs whose dimension 0 the benchmark may multiply to reach its size (the op then works on a larger
  // batch; its call does not depend on that dimension). Empty: the case runs at its test size.
  std::vector<size_t> batch_inputs;
};
OpCase make_case(std::string name, std::vector<InputSpec> inputs, OpFn run, RefFn reference, bool grad = true);
// The inputs that broadcast to the output's leading dimension: those of the highest rank whose dimension 0 is the
// largest (for batch_inputs of ops that broadcast their inputs; none when that rank is 0).
std::vector<size_t> leading_inputs(const std::vector<InputSpec>& inputs);
// The elements of a shape, as a double (for FLOP counts).
double shape_elements(const Shape& s);

// The inputs' values, drawn by their samplers.
std::vector<HostTensor> draw_inputs(const OpCase& c, Generator& gen);
// Tensors of those values (floats in `dtype`) on `device`; with requires_grad, the inputs the gradient check
// differentiates require grad.
std::vector<Tensor> make_inputs(const OpCase& c, const std::vector<HostTensor>& host, DType dtype, Device device,
                                bool requires_grad);

// Forward on the CPU against the reference, in `dtype`; the op must leave its inputs bitwise unchanged (here
// and in check_cuda_matches_cpu).
void check_forward(const OpCase& c, DType dtype);
// Autograd against central finite differences in f64 by the one checker (gradient_check.h, its rule and
// tolerance 1e-6), also: each input alone requiring grad, and the f32 gradients against the f64 ones.
void check_gradient(const OpCase& c);
// The op on cuda:0 against the CPU on the same inputs (outputs and gradients), TF32 off.
void check_cuda_matches_cpu(const OpCase& c, DType dtype);

// The parametrized tests of every case (op_tests.cc): INSTANTIATE_TEST_SUITE_P(Family, OpTest, ValuesIn(cases),
// case_name) runs forward in f32 and f64 and CUDA against the CPU; the same with OpGradientTest and
// differentiable(cases) checks gradients.
class OpTest : public ::testing::TestWithParam<OpCase> {};
class OpGradientTest : public ::testing::TestWithParam<OpCase> {};
std::vector<OpCase> differentiable(std::vector<OpCase> cases);  // those with grad set

// Test-name generator for INSTANTIATE_TEST_SUITE_P, and how GoogleTest prints a case.
std::string case_name(const ::testing::TestParamInfo<OpCase>& info);
void PrintTo(const OpCase& c, std::ostream* os);

}  // namespace testing
}  // namespace tandem
