// CPU backend entry points that the op front end does not reach with every argument: GEMM with alpha, beta,
// padded leading dims and batch strides (0 included), the Min reduction, and accumulating index kernels;
// each against a double-precision loop.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "runtime/base/config.h"
#include "runtime/base/error.h"
#include "runtime/tensor/backend.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using tandem::testing::fresh_seed;

Backend& cpu() { return backend_for(Device::cpu()); }

struct GemmCase {
  int64_t m, n, k, batch;
  double alpha, beta;
  bool shared_b;  // stride_b = 0: one B for every batch item
};

void check_gemm(DType t, bool ta, bool tb, const GemmCase& g) {
  const int64_t a_rows = ta ? g.k : g.m, a_cols = ta ? g.m : g.k;
  const int64_t b_rows = tb ? g.n : g.k, b_cols = tb ? g.k : g.n;
  const int64_t lda = a_cols + 2, ldb = b_cols + 3, ldc = g.n + 1;  // padded rows
  const int64_t sa = a_rows * lda + 5, sb = g.shared_b ? 0 : b_rows * ldb, sc = g.m * ldc + 4;
  Generator gen(fresh_seed());
  Tensor a = uniform({g.batch * sa}, -1, 1, gen, t),
         b = uniform({(g.shared_b ? 1 : g.batch) * b_rows * ldb}, -1, 1, gen, t);
  Tensor c = uniform({g.batch * sc}, -1, 1, gen, t);
  std::vector<double> av = a.to_vector<double>(), bv = b.to_vector<double>(), want = c.to_vector<double>();
  for (int64_t p = 0; p < g.batch; ++p)
    for (int64_t i = 0; i < g.m; ++i)
      for (int64_t j = 0; j < g.n; ++j) {
        double s = 0;
        for (int64_t q = 0; q < g.k; ++q) {
          double x = av[p * sa + (ta ? q * lda + i : i * lda + q)];
          double y = bv[p * sb + (tb ? j * ldb + q : q * ldb + j)];
          s += x * y;
        }
        double& out = want[p * sc + i * ldc + j];
        out = g.alpha * s + (g.beta == 0 ? 0.0 : g.beta * out);
      }
  cpu().gemm({t, ta, tb, g.m, g.n, g.k, g.alpha, a.raw_data(), lda, sa, b.raw_data(), ldb, sb, g.beta, c.raw_data(),
              ldc, sc, g.batch},
             Stream());
  std::vector<double> got = c.to_vector<double>();
  double tol = t == DType::F32 ? 1e-5 * std::sqrt(static_cast<double>(g.k) + 1) : 1e-12;
  double worst = 0;
  for (size_t i = 0; i < got.size(); ++i)
    worst = std::max(worst, std::abs(got[i] - want[i]) / std::max(1.0, std::abs(want[i])));
  EXPECT_LE(worst, tol) << dtype_name(t) << (ta ? " A^T" : " A") << (tb ? " B^T" : " B") << " m=" << g.m << " n=" << g.n
                        << " k=" << g.k << " batch=" << g.batch << " alpha=" << g.alpha << " beta=" << g.beta;
}

TEST(CpuGemm, AlphaBetaPaddedLeadingDimsAndBatchStrides) {
  const GemmCase cases[] = {{1, 1, 1, 1, 1.0, 0.0, false},    {7, 19, 5, 2, 0.5, 1.0, false},
                            {13, 33, 70, 3, 2.0, -0.5, true}, {6, 16, 260, 1, 1.0, 0.25, false},
                            {5, 6, 0, 2, 1.0, 0.75, false},   {4, 3, 2, 2, 0.0, 2.0, false}};
  for (DType t : {DType::F32, DType::F64})
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const GemmCase& g : cases) check_gemm(t, ta, tb, g);
}

// f32 goes through oneDNN (kernels/cpu/onednn.cc) in two pieces from 2^20 multiply-adds, by rows or by columns
// of C, whichever are more: both paths, oneDNN's and the plain gemm_cpu, against the f64 loop on such shapes.
TEST(CpuGemm, OneDnnAndPlainKernelsOnShapesSplitInPieces) {
  const GemmCase cases[] = {{201, 40, 150, 2, 1.0, 0.0, false},  // by rows, odd
                            {8, 1000, 512, 1, 1.0, 0.0, false},  // by columns: a fully connected layer
                            {64, 77, 300, 1, -1.5, 0.5, false}};
  for (bool onednn : {true, false}) {
    set_cpu_onednn(onednn);
    for (bool ta : {false, true})
      for (bool tb : {false, true})
        for (const GemmCase& g : cases) check_gemm(DType::F32, ta, tb, g);
  }
  set_cpu_onednn(true);
}

TEST(CpuGemm, BetaZeroOverwritesNaN) {
  std::vector<float> a{1, 2}, b{3, 4}, c{std::numeric_limits<float>::quiet_NaN()};
  cpu().gemm({DType::F32, false, false, 1, 1, 2, 1.0, a.data(), 2, 0, b.data(), 1, 0, 0.0, c.data(), 1, 0, 1},
             Stream());
  EXPECT_EQ(c[0], 11.0f);
}

TEST(CpuReduce, MinMaxSumWithFirstIndexOfTheExtreme) {
  // [outer 2, r 4, inner 3] with a repeated minimum and maximum in some columns.
  std::vector<double> x = {5, 1, 0, 2, 1, 7, 5, 3,  0, -1, 9,  7,  //
                           0, 0, 0, 0, 0, 0, 4, -2, 3, 4,  -2, 1};
  std::vector<double> out(6);
  std::vector<int64_t> idx(6);
  cpu().reduce({ReduceOp::Min, DType::F64, x.data(), 2, 4, 3, out.data(), idx.data()}, Stream());
  EXPECT_EQ(out, (std::vector<double>{-1, 1, 0, 0, -2, 0}));
  EXPECT_EQ(idx, (std::vector<int64_t>{3, 0, 0, 0, 2, 0}));
  cpu().reduce({ReduceOp::Max, DType::F64, x.data(), 2, 4, 3, out.data(), idx.data()}, Stream());
  EXPECT_EQ(out, (std::vector<double>{5, 9, 7, 4, 0, 3}));
  EXPECT_EQ(idx, (std::vector<int64_t>{0, 3, 1, 2, 0, 2}));
  cpu().reduce({ReduceOp::Sum, DType::F64, x.data(), 2, 4, 3, out.data(), nullptr}, Stream());
  EXPECT_EQ(out, (std::vector<double>{11, 14, 14, 8, -4, 4}));
  // NaN wins, at its first position.
  std::vector<float> n = {1, std::numeric_limits<float>::quiet_NaN(), 3, std::numeric_limits<float>::quiet_NaN()};
  float m = 0;
  int64_t at = -1;
  cpu().reduce({ReduceOp::Min, DType::F32, n.data(), 1, 4, 1, &m, &at}, Stream());
  EXPECT_TRUE(std::isnan(m));
  EXPECT_EQ(at, 1);
}

TEST(CpuIndex, AddAndScatterAccumulateIntoExistingValues) {
  // index_add: dst[o, idx[j], i] += src[o, j, i]; scatter_add: dst[o, idx[o, j, i], i] += src[o, j, i].
  std::vector<double> src = {1, 2, 3, 4, 5, 6};  // [outer 1, n_idx 3, inner 2]
  std::vector<int64_t> idx = {2, 0, 2};
  std::vector<double> dst = {10, 10, 20, 20, 30, 30};  // [1, 3, 2]
  cpu().index_add({DType::F64, src.data(), 1, 3, 2, idx.data(), 3, dst.data()}, Stream());
  EXPECT_EQ(dst, (std::vector<double>{13, 14, 20, 20, 36, 38}));
  std::vector<int64_t> sidx = {1, 0, 1, 1, 0, 2};
  std::vector<double> sdst = {0, 0, 0, 0, 1, 1};
  cpu().scatter_add({DType::F64, src.data(), 1, 3, 2, sidx.data(), 3, sdst.data()}, Stream());
  EXPECT_EQ(sdst, (std::vector<double>{5, 2, 4, 4, 1, 7}));
  std::vector<int64_t> bad = {0, 3, 1};
  EXPECT_THROW(cpu().index_add({DType::F64, src.data(), 1, 3, 2, bad.data(), 3, dst.data()}, Stream()), IndexError);
}

}  // namespace
}  // namespace tandem
