// The simulated cuBLAS against a naive column-major GEMM written from BLAS's definition, and the misuse
// cuBLAS and a GPU refuse: invalid leading dimensions and types, streams and memory of another device.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "tests/cudasim/sim_testing.h"

namespace {

using cudasim_testing::DeviceBuffer;

// The device handles of a test: cuda:`device` current, a stream and a cuBLAS handle on it.
using OnDevice = cudasim_testing::LibraryOnDevice<cublasHandle_t, cublasStatus_t, cublasCreate, cublasSetStream,
                                                  cublasDestroy, CUBLAS_STATUS_SUCCESS>;

struct Shape {
  cublasOperation_t ta, tb;
  int64_t m, n, k, lda, ldb, ldc;
  long long sa, sb, sc;
  int64_t batch;
};

int64_t rows_a(const Shape& s) { return s.ta == CUBLAS_OP_N ? s.m : s.k; }
int64_t cols_a(const Shape& s) { return s.ta == CUBLAS_OP_N ? s.k : s.m; }
int64_t rows_b(const Shape& s) { return s.tb == CUBLAS_OP_N ? s.k : s.n; }
int64_t cols_b(const Shape& s) { return s.tb == CUBLAS_OP_N ? s.n : s.k; }
size_t elements(int64_t cols, int64_t ld, long long stride, int64_t batch) {
  return static_cast<size_t>((batch - 1) * stride + cols * ld);
}

// C = alpha op(A) op(B) + beta C per batch, from the definition (beta = 0: C is not read). `round` maps each
// input before it is multiplied.
template <typename T>
std::vector<double> reference(const Shape& s, double alpha, const std::vector<T>& A, const std::vector<T>& B,
                              double beta, const std::vector<T>& C, const std::function<double(T)>& round) {
  std::vector<double> out(C.begin(), C.end());
  for (int64_t b = 0; b < s.batch; ++b)
    for (int64_t i = 0; i < s.m; ++i)
      for (int64_t j = 0; j < s.n; ++j) {
        double sum = 0;
        for (int64_t l = 0; l < s.k; ++l) {
          const T a = s.ta == CUBLAS_OP_N ? A[b * s.sa + l * s.lda + i] : A[b * s.sa + i * s.lda + l];
          const T bb = s.tb == CUBLAS_OP_N ? B[b * s.sb + j * s.ldb + l] : B[b * s.sb + l * s.ldb + j];
          sum += round(a) * round(bb);
        }
        double& c = out[b * s.sc + j * s.ldc + i];
        c = alpha * sum + (beta == 0 ? 0.0 : beta * c);
      }
  return out;
}

template <typename T>
double exact(T v) {
  return v;
}

// Runs the GEMM on the simulated device and returns C.
template <typename T>
std::vector<T> run(const Shape& s, T alpha, const std::vector<T>& A, const std::vector<T>& B, T beta,
                   const std::vector<T>& C, cublasComputeType_t compute) {
  OnDevice d;
  DeviceBuffer<T> a(A), b(B), c(C);
  const cudaDataType t = sizeof(T) == 4 ? CUDA_R_32F : CUDA_R_64F;
  EXPECT_EQ(
      cublasGemmStridedBatchedEx_64(d.handle, s.ta, s.tb, s.m, s.n, s.k, &alpha, a.get(), t, s.lda, s.sa, b.get(), t,
                                    s.ldb, s.sb, &beta, c.get(), t, s.ldc, s.sc, s.batch, compute, CUBLAS_GEMM_DEFAULT),
      CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamSynchronize(d.stream), cudaSuccess);
  return c.download();
}

// Every transpose pair, leading dimensions and batch strides larger than needed, alpha and beta.
template <typename T>
void check_all_transposes(cublasComputeType_t compute, double tol) {
  auto g = cudasim_testing::rng();
  const cublasOperation_t ops[] = {CUBLAS_OP_N, CUBLAS_OP_T, CUBLAS_OP_C};
  for (cublasOperation_t ta : ops) {
    for (cublasOperation_t tb : ops) {
      Shape s{ta, tb, 5, 7, 6, 0, 0, 0, 0, 0, 0, 3};
      s.lda = rows_a(s) + 2, s.ldb = rows_b(s) + 1, s.ldc = s.m + 3;
      s.sa = cols_a(s) * s.lda + 5, s.sb = cols_b(s) * s.ldb + 2, s.sc = s.n * s.ldc + 4;
      const auto A = cudasim_testing::uniform<T>(elements(cols_a(s), s.lda, s.sa, s.batch), g);
      const auto B = cudasim_testing::uniform<T>(elements(cols_b(s), s.ldb, s.sb, s.batch), g);
      const auto C = cudasim_testing::uniform<T>(elements(s.n, s.ldc, s.sc, s.batch), g);
      const T alpha = static_cast<T>(1.5), beta = static_cast<T>(-0.75);
      const std::vector<T> got = run(s, alpha, A, B, beta, C, compute);
      const std::vector<double> want = reference<T>(s, alpha, A, B, beta, C, exact<T>);
      for (size_t i = 0; i < got.size(); ++i)
        ASSERT_NEAR(got[i], want[i], tol) << "element " << i << " ta " << ta << " tb " << tb;
    }
  }
}

TEST(CudasimCublas, AllTransposesStridedBatchesF32) { check_all_transposes<float>(CUBLAS_COMPUTE_32F_PEDANTIC, 2e-6); }

TEST(CudasimCublas, AllTransposesStridedBatchesF64) { check_all_transposes<double>(CUBLAS_COMPUTE_64F, 1e-14); }

TEST(CudasimCublas, ComputeTypesWithoutTf32AreExactFloatProducts) {
  auto g = cudasim_testing::rng();
  Shape s{CUBLAS_OP_N, CUBLAS_OP_N, 8, 8, 64, 8, 64, 8, 0, 0, 0, 1};
  const auto A = cudasim_testing::uniform<float>(s.m * s.k, g), B = cudasim_testing::uniform<float>(s.k * s.n, g);
  const std::vector<float> C(s.m * s.n, 0.f);
  const std::vector<double> want = reference<float>(s, 1, A, B, 0, C, exact<float>);
  for (cublasComputeType_t t : {CUBLAS_COMPUTE_32F, CUBLAS_COMPUTE_32F_PEDANTIC}) {
    const std::vector<float> got = run<float>(s, 1.f, A, B, 0.f, C, t);
    for (size_t i = 0; i < got.size(); ++i) ASSERT_NEAR(got[i], want[i], 1e-6) << "compute type " << t;
  }
}

// FAST_TF32 rounds the inputs to TF32: it matches a reference on rounded inputs, and differs from the exact
// products by about TF32's precision (2^-11 per input), far more than float's.
TEST(CudasimCublas, FastTf32RoundsInputs) {
  auto g = cudasim_testing::rng();
  Shape s{CUBLAS_OP_T, CUBLAS_OP_N, 16, 16, 128, 128, 128, 16, 0, 0, 0, 1};
  const auto A = cudasim_testing::uniform<float>(s.m * s.k, g), B = cudasim_testing::uniform<float>(s.k * s.n, g);
  const std::vector<float> C(s.m * s.n, 0.f);
  const std::vector<float> tf = run<float>(s, 1.f, A, B, 0.f, C, CUBLAS_COMPUTE_32F_FAST_TF32);
  const std::vector<float> fma = run<float>(s, 1.f, A, B, 0.f, C, CUBLAS_COMPUTE_32F_PEDANTIC);
  const std::vector<double> exact_products = reference<float>(s, 1, A, B, 0, C, exact<float>);
  const std::vector<double> tf32_products = reference<float>(s, 1, A, B, 0, C, cudasim_testing::tf32);
  double tf_err = 0, fma_err = 0;
  for (size_t i = 0; i < tf.size(); ++i) {
    EXPECT_NEAR(tf[i], tf32_products[i], 1e-5) << i;
    tf_err = std::max(tf_err, std::abs(tf[i] - exact_products[i]));
    fma_err = std::max(fma_err, std::abs(fma[i] - exact_products[i]));
  }
  // Terms are products of numbers in [-1, 1]: the error of each is at most 2 * 2^-11.
  EXPECT_LE(tf_err, s.k * 2 * std::ldexp(1.0, -11));
  EXPECT_GT(tf_err, 1e-4) << "TF32 rounding is not visible";
  EXPECT_LT(fma_err, 1e-5);
}

TEST(CudasimCublas, BetaZeroDoesNotReadC) {
  auto g = cudasim_testing::rng();
  Shape s{CUBLAS_OP_N, CUBLAS_OP_T, 4, 3, 5, 4, 3, 4, 0, 0, 0, 1};
  const auto A = cudasim_testing::uniform<float>(s.m * s.k, g), B = cudasim_testing::uniform<float>(s.n * s.k, g);
  const std::vector<float> C(s.m * s.n, std::numeric_limits<float>::quiet_NaN());
  const std::vector<float> got = run<float>(s, 2.f, A, B, 0.f, C, CUBLAS_COMPUTE_32F);
  const std::vector<double> want = reference<float>(s, 2, A, B, 0, C, exact<float>);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-6) << i;
}

TEST(CudasimCublas, KZeroScalesC) {
  auto g = cudasim_testing::rng();
  Shape s{CUBLAS_OP_N, CUBLAS_OP_N, 3, 4, 0, 3, 1, 3, 0, 0, 12, 2};
  const auto C = cudasim_testing::uniform<double>(24, g);
  const std::vector<double> got = run<double>(s, 1.0, {}, {}, 0.5, C, CUBLAS_COMPUTE_64F);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_EQ(got[i], 0.5 * C[i]);
  const std::vector<double> nan(24, std::numeric_limits<double>::quiet_NaN());
  for (double v : run<double>(s, 1.0, {}, {}, 0.0, nan, CUBLAS_COMPUTE_64F)) EXPECT_EQ(v, 0.0);
}

TEST(CudasimCublas, ZeroBatchStrideSharesA) {
  auto g = cudasim_testing::rng();
  Shape s{CUBLAS_OP_N, CUBLAS_OP_N, 3, 2, 4, 3, 4, 3, 0, 8, 6, 4};
  const auto A = cudasim_testing::uniform<double>(12, g), B = cudasim_testing::uniform<double>(32, g);
  const std::vector<double> C(24, 0.0);
  const std::vector<double> got = run<double>(s, 1.0, A, B, 0.0, C, CUBLAS_COMPUTE_64F_PEDANTIC);
  const std::vector<double> want = reference<double>(s, 1, A, B, 0, C, exact<double>);
  for (size_t i = 0; i < got.size(); ++i) EXPECT_NEAR(got[i], want[i], 1e-14) << i;
}

// Argument checks: each returns its documented status before any work is queued.
TEST(CudasimCublas, RefusesInvalidArguments) {
  OnDevice d;
  DeviceBuffer<float> a(64), b(64), c(64);
  DeviceBuffer<double> c64(64);
  const float one = 1, zero = 0;
  auto gemm = [&](cublasOperation_t ta, cublasOperation_t tb, int64_t m, int64_t n, int64_t k, int64_t lda, int64_t ldb,
                  int64_t ldc, cudaDataType ct, void* cp, cublasComputeType_t compute) {
    return cublasGemmStridedBatchedEx_64(d.handle, ta, tb, m, n, k, &one, a.get(), CUDA_R_32F, lda, 0, b.get(),
                                         CUDA_R_32F, ldb, 0, &zero, cp, ct, ldc, 0, 1, compute, CUBLAS_GEMM_DEFAULT);
  };
  const auto N = CUBLAS_OP_N, T = CUBLAS_OP_T;
  const auto f32 = CUBLAS_COMPUTE_32F;
  EXPECT_EQ(gemm(N, N, 4, 4, 4, 4, 4, 4, CUDA_R_32F, c.get(), f32), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(gemm(N, N, 4, 4, 3, 3, 3, 4, CUDA_R_32F, c.get(), f32), CUBLAS_STATUS_INVALID_VALUE) << "lda < m";
  EXPECT_EQ(gemm(T, N, 4, 4, 3, 2, 3, 4, CUDA_R_32F, c.get(), f32), CUBLAS_STATUS_INVALID_VALUE) << "lda < k";
  EXPECT_EQ(gemm(T, N, 4, 4, 3, 3, 3, 4, CUDA_R_32F, c.get(), f32), CUBLAS_STATUS_SUCCESS) << "lda = k for T";
  EXPECT_EQ(gemm(N, N, 4, 5, 3, 4, 2, 4, CUDA_R_32F, c.get(), f32), CUBLAS_STATUS_INVALID_VALUE) << "ldb < k";
  EXPECT_EQ(gemm(N, T, 4, 5, 3, 4, 4, 4, CUDA_R_32F, c.get(), f32), CUBLAS_STATUS_INVALID_VALUE) << "ldb < n";
  EXPECT_EQ(gemm(N, N, 4, 4, 4, 4, 4, 3, CUDA_R_32F, c.get(), f32), CUBLAS_STATUS_INVALID_VALUE) << "ldc < m";
  EXPECT_EQ(gemm(N, N, 0, 4, 4, 0, 4, 1, CUDA_R_32F, c.get(), f32), CUBLAS_STATUS_INVALID_VALUE) << "lda < 1";
  EXPECT_EQ(gemm(N, N, -1, 4, 4, 4, 4, 4, CUDA_R_32F, c.get(), f32), CUBLAS_STATUS_INVALID_VALUE) << "m < 0";
  EXPECT_EQ(gemm(CUBLAS_OP_CONJG, N, 4, 4, 4, 4, 4, 4, CUDA_R_32F, c.get(), f32), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(gemm(N, N, 4, 4, 4, 4, 4, 4, CUDA_R_32F, c.get(), CUBLAS_COMPUTE_64F), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(gemm(N, N, 4, 4, 4, 4, 4, 4, CUDA_R_64F, c64.get(), f32), CUBLAS_STATUS_NOT_SUPPORTED) << "mixed";
  EXPECT_EQ(gemm(N, N, 4, 4, 4, 4, 4, 4, CUDA_R_32F, c.get(), CUBLAS_COMPUTE_32I), CUBLAS_STATUS_NOT_SUPPORTED);
  EXPECT_EQ(cublasGemmStridedBatchedEx_64(d.handle, N, N, 4, 4, 4, &one, a.get(), CUDA_R_32F, 4, 0, b.get(), CUDA_R_32F,
                                          4, 0, &zero, c.get(), CUDA_R_32F, 4, 0, -1, f32, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_INVALID_VALUE)
      << "batchCount < 0";
  EXPECT_EQ(cudaStreamSynchronize(d.stream), cudaSuccess);
}

TEST(CudasimCublas, StatusNamesAndStrings) {
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_INVALID_VALUE), "CUBLAS_STATUS_INVALID_VALUE");
  EXPECT_STREQ(cublasGetStatusName(CUBLAS_STATUS_NOT_SUPPORTED), "CUBLAS_STATUS_NOT_SUPPORTED");
  EXPECT_STRNE(cublasGetStatusString(CUBLAS_STATUS_INVALID_VALUE), cublasGetStatusString(CUBLAS_STATUS_SUCCESS));
}

// cuda:2 is never faulted in this test program; its streams are only handed to a cuda:0 handle.
TEST(CudasimCublas, StreamOfAnotherDeviceIsRefused) {
  cudaStream_t other;
  ASSERT_NO_FATAL_FAILURE(cudasim_testing::create_stream_on(2, &other));
  OnDevice d(0);
  EXPECT_EQ(cublasSetStream(d.handle, other), CUBLAS_STATUS_INVALID_VALUE);
  EXPECT_EQ(cublasSetStream(d.handle, nullptr), CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
}

TEST(CudasimCublas, HandleHoldsDeviceMemoryUntilDestroyed) {
  cudasim_testing::expect_handles_hold_device_memory(cublasCreate, cublasDestroy, CUBLAS_STATUS_SUCCESS,
                                                     CUBLAS_STATUS_ALLOC_FAILED);
}

// A GPU faults on memory its kernels may not touch; the device's error is sticky. cuda:1 and cuda:3 are
// faulted here and used by no other test.
TEST(CudasimCublas, MemoryOfAnotherDeviceFaults) {
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceBuffer<float> a0(16);
  OnDevice d(1);
  DeviceBuffer<float> b(16), c(16);
  const float one = 1, zero = 0;
  ASSERT_EQ(cublasGemmStridedBatchedEx_64(d.handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a0.get(), CUDA_R_32F, 4, 0,
                                          b.get(), CUDA_R_32F, 4, 0, &zero, c.get(), CUDA_R_32F, 4, 0, 1,
                                          CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);  // the fault shows when the work runs
  EXPECT_EQ(cudaStreamSynchronize(d.stream), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress) << "the error is sticky";
}

TEST(CudasimCublas, BatchBeyondTheAllocationFaults) {
  OnDevice d(3);
  DeviceBuffer<double> a(16), b(16), c(16);
  const double one = 1, zero = 0;
  // Two batches of C 16 elements apart need 32 elements.
  ASSERT_EQ(cublasGemmStridedBatchedEx_64(d.handle, CUBLAS_OP_N, CUBLAS_OP_N, 4, 4, 4, &one, a.get(), CUDA_R_64F, 4, 0,
                                          b.get(), CUDA_R_64F, 4, 0, &zero, c.get(), CUDA_R_64F, 4, 16, 2,
                                          CUBLAS_COMPUTE_64F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamSynchronize(d.stream), cudaErrorIllegalAddress);
}

}  // namespace
