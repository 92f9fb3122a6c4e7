// CUDA reductions (rows, columns, split two-pass plans, NaN and ties, determinism) and softmax / log-softmax
// with their backward, against the CPU backend, with guarded outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "tests/kernels/kernel_compare.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {
namespace {

struct Layout {
  int64_t outer, r, inner;
};

std::string layout_name(const Layout& l) {
  return "[" + std::to_string(l.outer) + ", " + std::to_string(l.r) + ", " + std::to_string(l.inner) + "]";
}

// Rows (inner == 1) and columns, small and large, including shapes that split r into segments.
const std::vector<Layout> kLayouts = {{1, 1, 1},      {3, 7, 1},       {1000, 5, 1},    {64, 1000, 1},
                                      {5, 4096, 1},   {2, 100003, 1},  {1, 1 << 21, 1}, {1, 3, 1 << 20},
                                      {4, 33, 7},     {2, 1000, 64},   {1, 50000, 3},   {100, 3, 200},
                                      {3, 20000, 16}, {1, 1 << 18, 4}, {7, 1, 5},       {1, 4099, 1 << 8}};

void check_reduce(ReduceOp op, DType t, const Layout& l, int64_t shift, const Tensor& x_cpu) {
  const std::string what = std::string(op == ReduceOp::Sum   ? "sum"
                                       : op == ReduceOp::Max ? "max"
                                                             : "min") +
                           " " + dtype_name(t) + " " + layout_name(l) + " shift=" + std::to_string(shift);
  const bool with_indices = op != ReduceOp::Sum;
  const int64_t n = l.outer * l.inner;
  Guarded want_v(t, n, Device::cpu()), want_i(DType::I64, n, Device::cpu());
  Guarded got_v(t, n, Device::cuda(0), shift), got_i(DType::I64, n, Device::cuda(0), shift);
  auto indices_of = [&](Guarded& g) { return with_indices ? static_cast<int64_t*>(g.data()) : nullptr; };
  cpu_backend().reduce({op, t, x_cpu.raw_data(), l.outer, l.r, l.inner, want_v.data(), indices_of(want_i)}, Stream());
  Tensor xd = to_gpu(x_cpu, shift);
  gpu_backend().reduce({op, t, xd.raw_data(), l.outer, l.r, l.inner, got_v.data(), indices_of(got_i)}, gpu_stream());
  Tensor got_values = to_host(got_v.middle());
  if (op == ReduceOp::Sum) {
    expect_close(got_values, want_v.middle(), tolerance(t), what);
  } else {
    expect_bitwise_equal(got_values, want_v.middle(), what);
    expect_bitwise_equal(to_host(got_i.middle()), want_i.middle(), what + " indices");
    got_i.expect_intact(what + " indices");
  }
  got_v.expect_intact(what);
}

TEST(CudaReduce, SumMaxMinMatchCpu) {
  TD_REQUIRE_GPU();
  for (DType t : {DType::F32, DType::F64})
    for (const Layout& l : kLayouts) {
      Tensor x = random_cpu({l.outer * l.r * l.inner}, t, -2.0, 3.0);
      for (ReduceOp op : {ReduceOp::Sum, ReduceOp::Max, ReduceOp::Min})
        for (int64_t shift : {0, 1}) check_reduce(op, t, l, shift, x);
    }
}

TEST(CudaReduce, SumOverAnEmptyDimIsZero) {
  TD_REQUIRE_GPU();
  for (const Layout& l : {Layout{3, 0, 1}, Layout{2, 0, 5}}) {
    Tensor x = empty({1}, DType::F32);
    check_reduce(ReduceOp::Sum, DType::F32, l, 0, x);
  }
}

TEST(CudaReduce, NaNAndTiesPickTheFirstPositionLikeTheCpu) {
  TD_REQUIRE_GPU();
  // Few distinct values (many ties), with NaNs sprinkled in some rows and columns.
  for (DType t : {DType::F32, DType::F64})
    for (const Layout& l : {Layout{300, 40, 1}, Layout{50, 37, 1}, Layout{4, 3000, 1}, Layout{1, 1 << 20, 1},
                            Layout{6, 50, 9}, Layout{2, 20000, 8}}) {
      Tensor x = random_cpu({l.outer * l.r * l.inner}, DType::F64, 0, 4).to(DType::I32).to(t).contiguous();
      Tensor noise = random_cpu({x.numel()}, DType::F64, 0, 1);
      auto* xv = static_cast<uint8_t*>(x.raw_data());
      const double* nv = noise.data<double>();
      for (int64_t i = 0; i < x.numel(); ++i) {
        if (nv[i] < 0.002) {
          if (t == DType::F32)
            reinterpret_cast<float*>(xv)[i] = NAN;
          else
            reinterpret_cast<double*>(xv)[i] = NAN;
        } else if (nv[i] < 0.004) {
          if (t == DType::F32)
            reinterpret_cast<float*>(xv)[i] = -0.0f;
          else
            reinterpret_cast<double*>(xv)[i] = -0.0;
        }
      }
      // Aligned rows are read as vectors (a chunk's best first, then against the lane's), misaligned ones
      // element by element: both must keep the first NaN and the first of equal values.
      for (ReduceOp op : {ReduceOp::Max, ReduceOp::Min})
        for (int64_t shift : {0, 1}) check_reduce(op, t, l, shift, x);
    }
}

TEST(CudaReduce, IsDeterministicAndIndependentOfAlignment) {
  TD_REQUIRE_GPU();
  for (const Layout& l : {Layout{1, 1 << 22, 1}, Layout{2, 1 << 19, 8}, Layout{512, 777, 1}}) {
    Tensor x = random_cpu({l.outer * l.r * l.inner}, DType::F32, -1.0, 1.0);
    const int64_t n = l.outer * l.inner;
    std::vector<Tensor> results;
    for (int64_t shift : {0, 0, 1, 2}) {
      Tensor xd = to_gpu(x, shift);
      Guarded out(DType::F32, n, Device::cuda(0));
      gpu_backend().reduce({ReduceOp::Sum, DType::F32, xd.raw_data(), l.outer, l.r, l.inner, out.data(), nullptr},
                           gpu_stream());
      results.push_back(to_host(out.middle()));
    }
    for (size_t i = 1; i < results.size(); ++i)
      expect_bitwise_equal(results[i], results[0], "sum " + layout_name(l) + " run " + std::to_string(i));
  }
}

// Softmax shapes: rows held in registers (one lane to a block per row; up to 16384 f32 with twice the registers
// per lane), rows too long for them (one block per row, and split over blocks when rows are few: the last two),
// columns short and long.
const std::vector<Layout> kSoftmaxLayouts = {{1, 1, 1},     {7, 10, 1},    {300, 1000, 1},  {33, 1023, 1},
                                             {4, 4096, 1},  {3, 8192, 1},  {3, 10000, 1},   {2, 16384, 1},
                                             {3, 20000, 1}, {2, 70001, 1}, {1, 1 << 17, 1}, {2, 140001, 1},
                                             {5, 21, 37},   {2, 64, 1000}, {3, 100, 40},    {1, 3000, 5}};

void check_softmax(bool log, DType t, const Layout& l, int64_t shift) {
  const std::string what = std::string(log ? "log_softmax " : "softmax ") + dtype_name(t) + " " + layout_name(l) +
                           " shift=" + std::to_string(shift);
  const int64_t n = l.outer * l.r * l.inner;
  Tensor x = random_cpu({n}, t, -6.0, 6.0);
  Tensor want = empty({n}, t);
  cpu_backend().softmax({log, t, x.raw_data(), want.raw_data(), l.outer, l.r, l.inner}, Stream());
  Tensor xd = to_gpu(x, shift);
  Guarded got(t, n, Device::cuda(0), shift);
  gpu_backend().softmax({log, t, xd.raw_data(), got.data(), l.outer, l.r, l.inner}, gpu_stream());
  expect_close(to_host(got.middle()), want, tolerance(t) * 4, what);
  got.expect_intact(what);

  // Backward from the CPU's y and a random upstream gradient.
  Tensor gy = random_cpu({n}, t, -1.0, 1.0);
  Tensor want_gx = empty({n}, t);
  cpu_backend().softmax_backward({log, t, want.raw_data(), gy.raw_data(), want_gx.raw_data(), l.outer, l.r, l.inner},
                                 Stream());
  Tensor yd = to_gpu(want, shift), gyd = to_gpu(gy, shift);
  Guarded got_gx(t, n, Device::cuda(0), shift);
  gpu_backend().softmax_backward({log, t, yd.raw_data(), gyd.raw_data(), got_gx.data(), l.outer, l.r, l.inner},
                                 gpu_stream());
  // The backward subtracts nearly equal terms: compare with a tolerance scaled by the row sum's size.
  expect_close(to_host(got_gx.middle()), want_gx, tolerance(t) * 64, what + " backward");
  got_gx.expect_intact(what + " backward");
}

TEST(CudaSoftmax, ForwardAndBackwardMatchCpu) {
  TD_REQUIRE_GPU();
  for (DType t : {DType::F32, DType::F64})
    for (const Layout& l : kSoftmaxLayouts)
      for (bool log : {false, true})
        for (int64_t shift : {0, 1}) check_softmax(log, t, l, shift);
}

TEST(CudaSoftmax, IsDeterministicAndIndependentOfAlignment) {
  TD_REQUIRE_GPU();
  // Cached rows (vector and element loads; 8 and 16 chunks per lane), a block per long row, long rows split over
  // blocks.
  for (const Layout& l : {Layout{64, 1000, 1}, Layout{6, 12000, 1}, Layout{6, 20000, 1}, Layout{1, 1 << 17, 1}})
    for (bool log : {false, true}) {
      const int64_t n = l.outer * l.r;
      Tensor x = random_cpu({n}, DType::F32, -8.0, 8.0);
      std::vector<Tensor> results;
      for (int64_t shift : {0, 0, 1, 3}) {
        Tensor xd = to_gpu(x, shift);
        Guarded y(DType::F32, n, Device::cuda(0), shift);
        gpu_backend().softmax({log, DType::F32, xd.raw_data(), y.data(), l.outer, l.r, 1}, gpu_stream());
        results.push_back(to_host(y.middle()));
      }
      for (size_t i = 1; i < results.size(); ++i)
        expect_bitwise_equal(
            results[i], results[0],
            std::string(log ? "log_softmax " : "softmax ") + layout_name(l) + " run " + std::to_string(i));
    }
}

// EXPECTs that NaNs and infinities (with their signs) sit at the same positions.
void expect_same_specials(const Tensor& got, const Tensor& want, const std::string& what) {
  std::vector<double> g = got.to_vector<double>(), w = want.to_vector<double>();
  ASSERT_EQ(g.size(), w.size());
  int64_t bad = 0;
  for (size_t i = 0; i < g.size(); ++i) {
    if (std::isnan(g[i]) != std::isnan(w[i]) || std::isinf(g[i]) != std::isinf(w[i]))
      ++bad;
    else if (std::isinf(g[i]) && (g[i] > 0) != (w[i] > 0))
      ++bad;
  }
  EXPECT_EQ(bad, 0) << what << ": NaN/inf positions differ";
}

TEST(CudaSoftmax, InfinitiesAndNaNGiveTheCpuResult) {
  TD_REQUIRE_GPU();
  // Row 0: a -inf among finite values; row 1: all -inf; row 2: a NaN; row 3: +inf; row 4: a NaN among -infs
  // before finite values (the NaN comes while the running max is still -inf). Short rows (registers), long
  // rows (a block per row) and rows split over blocks.
  constexpr int64_t kRows = 5;
  for (int64_t len : {int64_t{8}, int64_t{20000}, int64_t{1} << 17})
    for (bool log : {false, true}) {
      Tensor x = random_cpu({kRows, len}, DType::F32, -3.0, 3.0);
      float* xv = x.data<float>();
      xv[3] = -INFINITY;
      for (int64_t j = 0; j < len; ++j) xv[len + j] = -INFINITY;
      xv[2 * len + 5] = NAN;
      xv[3 * len + 1] = INFINITY;
      for (int64_t j = 0; j < 4; ++j) xv[4 * len + j] = -INFINITY;
      xv[4 * len + 2] = NAN;
      Tensor want = empty({kRows, len}, DType::F32);
      cpu_backend().softmax({log, DType::F32, x.raw_data(), want.raw_data(), kRows, len, 1}, Stream());
      Tensor xd = to_gpu(x);
      Guarded got(DType::F32, kRows * len, Device::cuda(0));
      gpu_backend().softmax({log, DType::F32, xd.raw_data(), got.data(), kRows, len, 1}, gpu_stream());
      const std::string what = std::string(log ? "log_softmax" : "softmax") + " specials len=" + std::to_string(len);
      Tensor result = to_host(got.middle()).view({kRows, len});
      expect_close(result, want, 1e-5, what);
      expect_same_specials(result, want, what);
    }
}

}  // namespace
}  // namespace testing
}  // namespace tandem
