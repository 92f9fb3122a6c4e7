// CUDA unary, unary backward, binary (same shape, broadcast, strided, misaligned) and where kernels against
// the CPU backend, with guarded outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/tensor/tensor_desc.h"
#include "tests/kernels/kernel_compare.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {
namespace {

const std::vector<int64_t> kSizes = {1, 3, 4, 17, 1000, 4097, (1 << 16) + 3};

// Every op of the table (runtime/tensor/elementwise_table.h): a new op is compared without a change here.
#define TD_UNARY_VALUE(Name, ...) UnaryOp::Name,
const UnaryOp kUnaryOps[] = {TD_UNARY_OPS(TD_UNARY_VALUE)};
#undef TD_UNARY_VALUE

bool needs_positive(UnaryOp op) {
  return op == UnaryOp::Log || op == UnaryOp::Sqrt || op == UnaryOp::Pow || op == UnaryOp::RDivScalar;
}

std::string name_of(UnaryOp op, DType t, int64_t n, int64_t shift) {
  return "unary op " + std::to_string(static_cast<int>(op)) + " " + dtype_name(t) + " n=" + std::to_string(n) +
         " shift=" + std::to_string(shift);
}

TEST(CudaElementwise, UnaryMatchesCpu) {
  TD_REQUIRE_GPU();
  const UnaryParams p{1.7, 2.5};
  for (DType t : {DType::F32, DType::F64})
    for (UnaryOp op : kUnaryOps)
      for (int64_t n : kSizes)
        for (int64_t shift : {0, 1}) {
          const std::string what = name_of(op, t, n, shift);
          Tensor x = needs_positive(op) ? random_cpu({n}, t, 0.2, 4.0) : random_cpu({n}, t, -8.0, 8.0);
          Tensor want = empty({n}, t);
          cpu_backend().unary({op, t, x.raw_data(), want.raw_data(), n, p}, Stream());
          Tensor xd = to_gpu(x, shift);
          Guarded out(t, n, Device::cuda(0), shift == 0 ? 0 : 3);
          gpu_backend().unary({op, t, xd.raw_data(), out.data(), n, p}, gpu_stream());
          expect_close(to_host(out.middle()), want, tolerance(t), what);
          out.expect_intact(what);
        }
}

TEST(CudaElementwise, UnaryBackwardMatchesCpu) {
  TD_REQUIRE_GPU();
  const UnaryParams p{1.7, 2.5};
  for (DType t : {DType::F32, DType::F64})
    for (UnaryOp op : kUnaryOps)
      for (int64_t n : {int64_t{5}, int64_t{4099}, int64_t{1} << 15})
        for (int64_t shift : {0, 1}) {
          const std::string what = "backward of " + name_of(op, t, n, shift);
          Tensor x = needs_positive(op) ? random_cpu({n}, t, 0.2, 4.0) : random_cpu({n}, t, -8.0, 8.0);
          Tensor y = empty({n}, t);
          cpu_backend().unary({op, t, x.raw_data(), y.raw_data(), n, p}, Stream());
          Tensor gy = random_cpu({n}, t, -1.0, 1.0);
          // Pass only what the front end would save, so the null-pointer paths run too.
          const bool reads_y = unary_backward_reads_output(op), reads_x = !reads_y && !unary_backward_reads_nothing(op);
          Tensor want = empty({n}, t);
          cpu_backend().unary_backward({op, t, reads_x ? x.raw_data() : nullptr, reads_y ? y.raw_data() : nullptr,
                                        gy.raw_data(), want.raw_data(), n, p},
                                       Stream());
          Tensor xd = to_gpu(x, shift), yd = to_gpu(y, shift), gd = to_gpu(gy, shift);
          Guarded out(t, n, Device::cuda(0), shift);
          gpu_backend().unary_backward({op, t, reads_x ? xd.raw_data() : nullptr, reads_y ? yd.raw_data() : nullptr,
                                        gd.raw_data(), out.data(), n, p},
                                       gpu_stream());
          expect_close(to_host(out.middle()), want, tolerance(t), what);
          out.expect_intact(what);
        }
}

// One binary case: a and b (CPU, any strides) broadcast to out_shape.
struct BinaryCase {
  std::string name;
  Shape out_shape;
  Tensor a, b;
};

// Operands laid out as views: contiguous, broadcast along various dims, transposed, misaligned by one element.
std::vector<BinaryCase> binary_cases(DType t, double lo, double hi) {
  std::vector<BinaryCase> cases;
  auto rnd = [&](const Shape& s) { return random_cpu(s, t, lo, hi); };
  cases.push_back({"same shape", {1000}, rnd({1000}), rnd({1000})});
  cases.push_back({"same shape odd", {4099}, rnd({4099}), rnd({4099})});
  cases.push_back({"large", {(1 << 18) + 5}, rnd({(1 << 18) + 5}), rnd({(1 << 18) + 5})});
  cases.push_back({"row bias", {37, 64}, rnd({37, 64}), rnd({64})});
  cases.push_back({"row bias odd", {37, 63}, rnd({37, 63}), rnd({63})});
  cases.push_back({"column broadcast", {40, 32}, rnd({40, 32}), rnd({40, 1})});
  cases.push_back({"channel broadcast", {3, 8, 5, 4}, rnd({3, 8, 5, 4}), rnd({1, 8, 1, 1})});
  cases.push_back({"scalar", {513}, rnd({513}), rnd({1})});
  cases.push_back({"both broadcast", {24, 36}, rnd({24, 1}), rnd({1, 36})});
  cases.push_back({"transposed", {48, 40}, rnd({40, 48}).t(), rnd({48, 40})});
  cases.push_back({"misaligned", {256}, rnd({257}).narrow(0, 1, 256), rnd({256})});
  cases.push_back({"sliced rows", {16, 32}, rnd({16, 40}).narrow(1, 4, 32), rnd({16, 32})});
  return cases;
}

#define TD_BINARY_VALUE(Name, ...) BinaryOp::Name,
const BinaryOp kArithmetic[] = {TD_BINARY_OPS(TD_BINARY_VALUE)};
const BinaryOp kComparisons[] = {TD_COMPARISONS(TD_BINARY_VALUE)};
#undef TD_BINARY_VALUE

// Runs op on both backends; a and b keep their strides on the GPU (copied storage-wise).
void check_binary(BinaryOp op, DType t, const BinaryCase& c, int64_t out_shift) {
  const std::string what = c.name + " op " + std::to_string(static_cast<int>(op)) + " " + dtype_name(t);
  const DType out_t = is_comparison(op) ? DType::U8 : t;
  const int64_t n = shape_numel(c.out_shape);
  StridedDesc ad = broadcast_desc(c.a, c.out_shape), bd = broadcast_desc(c.b, c.out_shape);
  Tensor want = empty(c.out_shape, out_t);
  cpu_backend().binary({op, t, c.a.raw_data(), ad, c.b.raw_data(), bd, want.raw_data(), desc_of(want)}, Stream());
  Tensor a_holder, b_holder;
  const void* ap = gpu_mirror(c.a, a_holder);
  const void* bp = gpu_mirror(c.b, b_holder);
  Guarded out(out_t, n, Device::cuda(0), out_shift);
  gpu_backend().binary({op, t, ap, ad, bp, bd, out.data(), desc_of(out.view(c.out_shape))}, gpu_stream());
  Tensor got = to_host(out.middle()).view(c.out_shape);
  if (is_comparison(op) || op == BinaryOp::Maximum || op == BinaryOp::Minimum)
    expect_bitwise_equal(got, want, what);
  else
    expect_close(got, want, tolerance(t), what);
  out.expect_intact(what);
}

TEST(CudaElementwise, BinaryArithmeticMatchesCpu) {
  TD_REQUIRE_GPU();
  for (DType t : {DType::F32, DType::F64})
    for (const BinaryCase& c : binary_cases(t, 0.5, 4.0))
      for (BinaryOp op : kArithmetic)
        for (int64_t shift : {0, 1}) check_binary(op, t, c, shift);
}

TEST(CudaElementwise, ComparisonsMatchCpuForEveryNumericDtype) {
  TD_REQUIRE_GPU();
  for (DType t : {DType::F32, DType::F64, DType::I32, DType::I64, DType::U8})
    // A narrow integer range makes ties frequent.
    for (const BinaryCase& c : binary_cases(t, 0.0, 6.0))
      for (BinaryOp op : kComparisons) check_binary(op, t, c, 0);
}

TEST(CudaElementwise, MaximumAndMinimumPropagateNaNLikeTheCpu) {
  TD_REQUIRE_GPU();
  const double nan = std::nan("");
  std::vector<double> av = {1, nan, 3, nan, -0.0, 0.0, 5}, bv = {2, 1, nan, nan, 0.0, -0.0, 5};
  for (DType t : {DType::F32, DType::F64}) {
    BinaryCase c{"nan", {7}, from_vector(av, {7}).to(t), from_vector(bv, {7}).to(t)};
    check_binary(BinaryOp::Maximum, t, c, 0);
    check_binary(BinaryOp::Minimum, t, c, 0);
  }
}

TEST(CudaElementwise, WhereMatchesCpuForEveryElementSize) {
  TD_REQUIRE_GPU();
  for (DType t : {DType::U8, DType::BF16, DType::F32, DType::F64}) {
    const Shape shape{6, 7, 9};
    Tensor cond = random_cpu({6, 1, 9}, DType::F64, 0, 2).to(DType::U8);
    Tensor a = random_cpu({6, 7, 9}, t, 0, 100), b = random_cpu({7, 1}, t, 0, 100);
    StridedDesc cd = broadcast_desc(cond, shape), ad = broadcast_desc(a, shape), bd = broadcast_desc(b, shape);
    Tensor want = empty(shape, t);
    cpu_backend().where({cond.raw_data(), cd, t, a.raw_data(), ad, b.raw_data(), bd, want.raw_data(), desc_of(want)},
                        Stream());
    Tensor cg = to_gpu(cond), ag = to_gpu(a), bg = to_gpu(b);
    Guarded out(t, shape_numel(shape), Device::cuda(0), 1);
    gpu_backend().where(
        {cg.raw_data(), cd, t, ag.raw_data(), ad, bg.raw_data(), bd, out.data(), desc_of(out.view(shape))},
        gpu_stream());
    expect_bitwise_equal(to_host(out.middle()).view(shape), want, std::string("where ") + dtype_name(t));
    out.expect_intact("where");
  }
}

}  // namespace
}  // namespace testing
}  // namespace tandem
