// bf16 storage with f32 math, on the CPU and on CUDA (skipped without a GPU). Elementwise: every unary op, its
// derivative and every arithmetic binary op on bf16 operands give the f64 result on the same bf16 values rounded
// to bf16 (exactly where f32 computes the result exactly, within one bf16 step otherwise), over the vector, tail,
// unaligned, broadcast and strided paths; gradients flow through bf16 casts into f32 leaves. Matrix products
// (cuBLAS's bf16 with f32 accumulation; the CPU's f32 on widened operands) and sums round once from f32: within
// one step plus f32 accumulation's bound, and exactly where each output is one product.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/backend.h"
#include "runtime/tensor/elementwise_table.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor_desc.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using tandem::testing::bf16_rounded;
using tandem::testing::bf16_steps;
using tandem::testing::expect_bf16_near;
using tandem::testing::f32_accumulation_slack;
using tandem::testing::fresh_seed;
using tandem::testing::random_bf16;

// Ops whose f32 result on bf16 operands in [1/4, 4] is exact (so rounding it once gives the correctly rounded value).
bool exact_in_f32(UnaryOp op) {
  switch (op) {
    case UnaryOp::Neg:
    case UnaryOp::Relu:
    case UnaryOp::Relu6:
    case UnaryOp::Abs:
    case UnaryOp::Clamp:
    case UnaryOp::AddScalar:
    case UnaryOp::RSubScalar: return true;
    default: return false;
  }
}
bool exact_in_f32(BinaryOp op) { return op != BinaryOp::Div; }

#define TD_UNARY_VALUE(Name, ...) UnaryOp::Name,
constexpr UnaryOp kUnaryOps[] = {TD_UNARY_OPS(TD_UNARY_VALUE)};
#undef TD_UNARY_VALUE

class Bf16On : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam().is_cuda()) TD_REQUIRE_GPU();
  }
  Device device() const { return GetParam(); }
  Tensor values(const Shape& shape, Generator& gen, bool positive) {
    return random_bf16(shape, gen, device(), positive);
  }
};

// Runs op on x (bf16 or f64, n elements from x's data) through the backend.
Tensor run_unary(UnaryOp op, const Tensor& x, UnaryParams p) {
  Tensor y = empty_like(x);
  backend_of(x).unary({op, x.dtype(), x.raw_data(), y.raw_data(), x.numel(), p}, current_stream(x.device()));
  return y;
}
Tensor run_unary_grad(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& g, UnaryParams p) {
  Tensor gx = empty_like(g);
  const void* xp = unary_backward_reads_output(op) || unary_backward_reads_nothing(op) ? nullptr : x.raw_data();
  const void* yp = unary_backward_reads_output(op) ? y.raw_data() : nullptr;
  backend_of(g).unary_backward({op, g.dtype(), xp, yp, g.raw_data(), gx.raw_data(), g.numel(), p},
                               current_stream(g.device()));
  return gx;
}

TEST_P(Bf16On, UnaryOpsAndTheirDerivativesRoundOnceFromF32) {
  Generator gen(fresh_seed());
  const UnaryParams p{0.75, 2.5};  // Pow's exponent, Clamp's bounds, the scalar of the *Scalar ops
  // 1003 elements: whole 8-wide vectors and a tail; a slice from element 1: the unaligned path.
  for (bool unaligned : {false, true}) {
    for (UnaryOp op : kUnaryOps) {
      const bool positive = op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Pow;
      Tensor x = values({1004}, gen, positive).slice(0, unaligned ? 1 : 0, unaligned ? 1004 : 1003);
      Tensor g = values({1004}, gen, false).slice(0, unaligned ? 1 : 0, unaligned ? 1004 : 1003);
      const std::string what = std::string(unaligned ? "unaligned " : "") + "op " + std::to_string(int(op));
      const Tensor y = run_unary(op, x, p);
      const Tensor y_ref64 = run_unary(op, x.to(DType::F64), p);
      expect_bf16_near(y, bf16_rounded(y_ref64), exact_in_f32(op) ? 0 : 1, Tensor(), what + " forward");
      // The derivative from the bf16 output the forward stored, as the backward pass gets it.
      const Tensor gx = run_unary_grad(op, x, y, g, p);
      const Tensor gx_ref64 = run_unary_grad(op, x.to(DType::F64), y.to(DType::F64), g.to(DType::F64), p);
      const bool exact_grad = op == UnaryOp::Neg || op == UnaryOp::Relu || op == UnaryOp::Relu6 ||
                              op == UnaryOp::Clamp || op == UnaryOp::Abs || op == UnaryOp::AddScalar;
      expect_bf16_near(gx, bf16_rounded(gx_ref64), exact_grad ? 0 : 1, Tensor(), what + " backward");
    }
  }
}

TEST_P(Bf16On, BinaryOpsOnContiguousBroadcastAndStridedOperands) {
  Generator gen(fresh_seed());
  // Rows of 40: whole 8-wide vectors (the vector kernel); rows of 37 and a transposed operand: the strided one.
  const Tensor a = values({6, 40}, gen, false), b = values({6, 40}, gen, false);
  const Tensor row = values({1, 40}, gen, false);
  const Tensor a37 = values({6, 37}, gen, false), at = values({37, 6}, gen, false).transpose(0, 1);
  struct Case {
    const char* name;
    Tensor a, b;
  };
  const std::vector<Case> cases = {
      {"contiguous", a, b}, {"broadcast row", a, row}, {"odd rows", a37, a37}, {"transposed", at, a37}};
  for (const Case& c : cases) {
    for (BinaryOp op :
         {BinaryOp::Add, BinaryOp::Sub, BinaryOp::Mul, BinaryOp::Div, BinaryOp::Maximum, BinaryOp::Minimum}) {
      auto apply = [&](const Tensor& x, const Tensor& y) {
        switch (op) {
          case BinaryOp::Add: return add(x, y);
          case BinaryOp::Sub: return sub(x, y);
          case BinaryOp::Mul: return mul(x, y);
          case BinaryOp::Div: return div(x, y);
          case BinaryOp::Maximum: return maximum(x, y);
          default: return minimum(x, y);
        }
      };
      const Tensor got = apply(c.a, c.b);
      const Tensor want = bf16_rounded(apply(c.a.to(DType::F64), c.b.to(DType::F64)));
      expect_bf16_near(got, want, exact_in_f32(op) ? 0 : 1, Tensor(),
                       std::string(c.name) + " op " + std::to_string(int(op)));
    }
  }
}

TEST_P(Bf16On, GradientsFlowThroughBf16CastsIntoF32Leaves) {
  Generator gen(fresh_seed());
  Tensor w = randn({5, 40}, gen, TensorOptions(DType::F32).with_device(device()));
  w.set_requires_grad(true);
  const Tensor c = values({5, 40}, gen, false);
  // loss = sum(relu(bf16(w)) * c): its gradient is c where bf16(w) > 0, else 0, exactly (every step is exact).
  Tensor loss = sum(mul(relu(w.to(DType::BF16)), c).to(DType::F32));
  loss.backward();
  ASSERT_TRUE(w.grad().defined());
  EXPECT_EQ(w.grad().dtype(), DType::F32);
  const std::vector<float> wb = w.to(DType::BF16).to(DType::F32).to_vector<float>();
  const std::vector<float> cv = c.to(DType::F32).to_vector<float>();
  const std::vector<float> grad = w.grad().to_vector<float>();
  for (size_t i = 0; i < grad.size(); ++i) EXPECT_EQ(grad[i], wb[i] > 0 ? cv[i] : 0.0f) << i;
}

TEST_P(Bf16On, LinearRoundsItsProductThenItsBiasAndSumsItsGradientsInF32) {
  Generator gen(fresh_seed());
  Tensor x = values({5, 37}, gen, false).set_requires_grad(), w = values({11, 37}, gen, false).set_requires_grad();
  Tensor b = values({11}, gen, false).set_requires_grad();
  Tensor y = linear(x, w, b);
  ASSERT_EQ(y.dtype(), DType::BF16);
  const Tensor g = values({5, 11}, gen, false);
  y.backward(g);
  auto f64 = [](const Tensor& t) { return t.detach().to(DType::F64); };
  const Tensor prod = matmul(f64(x), f64(w).t()), prod_mag = matmul(abs(f64(x)), abs(f64(w)).t());
  // The product is rounded, then the bias added and rounded: a first rounding tipped by f32 accumulation moves
  // the result by a step of the product.
  expect_bf16_near(y, bf16_rounded(add(bf16_rounded(prod).to(DType::F64), f64(b))), 1,
                   add(f32_accumulation_slack(prod_mag), bf16_steps(prod).to(device())), "linear forward");
  expect_bf16_near(x.grad(), bf16_rounded(matmul(f64(g), f64(w))), 1,
                   f32_accumulation_slack(matmul(abs(f64(g)), abs(f64(w)))), "linear input gradient");
  expect_bf16_near(w.grad(), bf16_rounded(matmul(f64(g).t(), f64(x))), 1,
                   f32_accumulation_slack(matmul(abs(f64(g)).t(), abs(f64(x)))), "linear weight gradient");
  expect_bf16_near(b.grad(), bf16_rounded(sum(f64(g), {0})), 1, f32_accumulation_slack(sum(abs(f64(g)), {0})),
                   "linear bias gradient");
}

TEST_P(Bf16On, BatchedMatmulAndOneProductPerOutput) {
  Generator gen(fresh_seed());
  const Tensor a = values({3, 4, 6}, gen, false), b = values({3, 6, 5}, gen, false);
  const Tensor want = matmul(a.to(DType::F64), b.to(DType::F64));
  expect_bf16_near(matmul(a, b), bf16_rounded(want), 1,
                   f32_accumulation_slack(matmul(abs(a).to(DType::F64), abs(b).to(DType::F64))), "batched matmul");
  // k = 1: each output one product, exact in f32, so rounded to nearest even to the bit.
  const Tensor col = values({64, 1}, gen, false), row = values({1, 8}, gen, false);
  expect_bf16_near(matmul(col, row), bf16_rounded(matmul(col.to(DType::F64), row.to(DType::F64))), 0, Tensor(),
                   "outer product");
}

TEST_P(Bf16On, OpsWithoutBf16KernelsSaySo) {
  Generator gen(fresh_seed());
  const Tensor x = values({4, 8}, gen, false);
  EXPECT_THROW(lt(x, x), DTypeError);  // comparisons read bf16 only as storage
  const Tensor i = ones({4}, TensorOptions(DType::I32).with_device(device()));
  EXPECT_THROW(relu(i), DTypeError);
}

INSTANTIATE_TEST_SUITE_P(Devices, Bf16On, ::testing::Values(Device::cpu(), Device::cuda()),
                         [](const ::testing::TestParamInfo<Device>& i) {
                           return std::string(i.param.is_cuda() ? "Cuda" : "Cpu");
                         });

}  // namespace
}  // namespace tandem
