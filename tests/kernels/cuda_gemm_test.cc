// CUDA GEMM (cuBLAS) against the CPU backend: every transpose combination, batches with strides (including
// a broadcast operand), alpha/beta, k = 0, padded leading dims; f32 with and without TF32, and f64.
#include <gtest/gtest.h>

#include <string>

#include "runtime/config.h"
#include "tests/kernels/kernel_compare.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {
namespace {

struct GemmCase {
  int64_t m, n, k, batch;
  double alpha, beta;
  bool broadcast_b;  // stride_b = 0
};

void check_gemm(DType t, bool ta, bool tb, const GemmCase& g, double tol) {
  // Row-major with padded leading dims.
  const int64_t a_rows = ta ? g.k : g.m, a_cols = ta ? g.m : g.k;
  const int64_t b_rows = tb ? g.n : g.k, b_cols = tb ? g.k : g.n;
  const int64_t lda = a_cols + 3, ldb = b_cols + 1, ldc = g.n + 2;
  const int64_t sa = a_rows * lda, sb = g.broadcast_b ? 0 : b_rows * ldb, sc = g.m * ldc;
  Tensor a = random_cpu({g.batch * sa}, t, -1, 1);
  Tensor b = random_cpu({(g.broadcast_b ? 1 : g.batch) * b_rows * ldb}, t, -1, 1);
  Tensor c0 = random_cpu({g.batch * sc}, t, -1, 1);
  Tensor want = c0.clone();
  cpu_backend().gemm(t, ta, tb, g.m, g.n, g.k, g.alpha, a.raw_data(), lda, sa, b.raw_data(), ldb, sb, g.beta,
                     want.raw_data(), ldc, sc, g.batch, Stream());
  Tensor ad = to_gpu(a), bd = to_gpu(b);
  Guarded got(t, g.batch * sc, Device::cuda(0));
  got.load(c0);
  gpu_backend().gemm(t, ta, tb, g.m, g.n, g.k, g.alpha, ad.raw_data(), lda, sa, bd.raw_data(), ldb, sb, g.beta,
                     got.data(), ldc, sc, g.batch, gpu_stream());
  const std::string what = std::string("gemm ") + dtype_name(t) + (ta ? " A^T" : " A") + (tb ? " B^T" : " B") +
                           " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                           " batch=" + std::to_string(g.batch);
  expect_close(to_host(got.middle()), want, tol, what);
  got.expect_intact(what);
}

const GemmCase kCases[] = {{1, 1, 1, 1, 1.0, 0.0, false},    {17, 33, 65, 1, 1.0, 0.0, false},
                           {64, 48, 128, 3, 0.5, 1.0, false}, {31, 7, 300, 4, 2.0, -0.5, true},
                           {5, 6, 0, 2, 1.0, 0.75, false},    {200, 130, 40, 1, 1.0, 0.0, false}};

TEST(CudaGemm, MatchesCpu) {
  TD_REQUIRE_GPU();
  const bool tf32 = allow_tf32();
  for (bool ta : {false, true})
    for (bool tb : {false, true})
      for (const GemmCase& g : kCases) {
        check_gemm(DType::F64, ta, tb, g, 1e-12);
        set_allow_tf32(false);
        check_gemm(DType::F32, ta, tb, g, 1e-5);
        set_allow_tf32(true);
        // TF32 keeps 10 mantissa bits of the inputs: errors grow like sqrt(k) * 2^-11.
        check_gemm(DType::F32, ta, tb, g, 3e-2);
      }
  set_allow_tf32(tf32);
}

}  // namespace
}  // namespace testing
}  // namespace tandem
