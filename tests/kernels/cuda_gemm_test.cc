// CUDA GEMM (cuBLAS) against the CPU backend: every transpose combination, batches with strides (including
// a broadcast operand), alpha/beta, k = 0, padded leading dims; f32 with and without TF32, and f64.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <algorithm>
#include <future>
#include <string>

#include "runtime/base/config.h"
#include "runtime/memory/cuda_thread.h"
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
  cpu_backend().gemm({t, ta, tb, g.m, g.n, g.k, g.alpha, a.raw_data(), lda, sa, b.raw_data(), ldb, sb, g.beta,
                      want.raw_data(), ldc, sc, g.batch},
                     Stream());
  Tensor ad = to_gpu(a), bd = to_gpu(b);
  Guarded got(t, g.batch * sc, Device::cuda(0));
  got.load(c0);
  gpu_backend().gemm({t, ta, tb, g.m, g.n, g.k, g.alpha, ad.raw_data(), lda, sa, bd.raw_data(), ldb, sb, g.beta,
                      got.data(), ldc, sc, g.batch},
                     gpu_stream());
  const std::string what = std::string("gemm ") + dtype_name(t) + (ta ? " A^T" : " A") + (tb ? " B^T" : " B") +
                           " m=" + std::to_string(g.m) + " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                           " batch=" + std::to_string(g.batch);
  expect_close(to_host(got.middle()), want, tol, what);
  got.expect_intact(what);
}

const GemmCase kCases[] = {{1, 1, 1, 1, 1.0, 0.0, false},     {17, 33, 65, 1, 1.0, 0.0, false},
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
        // Both sides sum in f32 in their own orders (or one in double): the difference grows like k * 2^-24 times
        // the products' size, so 1e-5 up to k = 128 and in proportion beyond (k = 300 measured 1.5e-5).
        check_gemm(DType::F32, ta, tb, g, 1e-5 * std::max(1.0, static_cast<double>(g.k) / 128));
        set_allow_tf32(true);
        // TF32 keeps 10 mantissa bits of the inputs: errors grow like sqrt(k) * 2^-11.
        check_gemm(DType::F32, ta, tb, g, 3e-2);
      }
  set_allow_tf32(tf32);
}

// Copies device tensor x to the host on stream s (waits for s).
Tensor host_copy(const Tensor& x, const Stream& s) {
  Tensor out = empty(x.shape(), TensorOptions(x.dtype()));
  EXPECT_EQ(cudaMemcpyAsync(out.raw_data(), x.raw_data(), x.nbytes(), cudaMemcpyDeviceToHost, s.cuda()), cudaSuccess);
  s.synchronize();
  return out;
}

void CUDART_CB wait_for_gate(void* gate) { static_cast<std::shared_future<void>*>(gate)->wait(); }

// A thread has one cuBLAS handle per GPU and binds it to each call's stream (an executor's single issuing
// thread queues GEMMs on both lanes of a worker): binding it to another stream must not move, or hold back,
// a GEMM already queued on the first. The thread is prepared first, as every thread that may block one of its
// streams must be: making the handle at the first GEMM, while `held` waits for this thread, hung on an H200.
TEST(CudaGemm, AGemmStaysOnItsStreamWhenTheThreadsHandleMoves) {
  TD_REQUIRE_GPU();
  prepare_cuda_thread(Device::cuda(0));
  const int64_t m = 16, n = 8, k = 24;
  Tensor a = random_cpu({m, k}, DType::F64, -1, 1), b = random_cpu({k, n}, DType::F64, -1, 1);
  Tensor want = zeros({m, n}, DType::F64);
  cpu_backend().gemm(
      {DType::F64, false, false, m, n, k, 1.0, a.raw_data(), k, 0, b.raw_data(), n, 0, 0.0, want.raw_data(), n, 0, 1},
      Stream());
  Tensor ad = to_gpu(a), bd = to_gpu(b), c_held = to_gpu(zeros({m, n}, DType::F64)),
         c_free = to_gpu(zeros({m, n}, DType::F64));
  const Stream held = Stream::create(Device::cuda(0)), free = Stream::create(Device::cuda(0));
  current_stream(Device::cuda(0)).synchronize();  // the inputs are on the GPU before the two streams read them
  std::promise<void> open;
  std::shared_future<void> gate = open.get_future().share();
  ASSERT_EQ(cudaLaunchHostFunc(held.cuda(), wait_for_gate, &gate), cudaSuccess);  // `held` waits for the gate
  auto gemm = [&](Tensor& c, const Stream& s) {
    gpu_backend().gemm(
        {DType::F64, false, false, m, n, k, 1.0, ad.raw_data(), k, 0, bd.raw_data(), n, 0, 0.0, c.raw_data(), n, 0, 1},
        s);
  };
  gemm(c_held, held);
  gemm(c_free, free);  // the same thread's handle, now bound to `free`
  expect_close(host_copy(c_free, free), want, 1e-12, "the GEMM on the free stream, done first");
  EXPECT_EQ(cudaStreamQuery(held.cuda()), cudaErrorNotReady);
  expect_bitwise_equal(host_copy(c_held, free), zeros({m, n}, DType::F64), "the held GEMM has not run yet");
  open.set_value();
  held.synchronize();
  expect_close(host_copy(c_held, held), want, 1e-12, "the GEMM on the held stream, once released");
}

}  // namespace
}  // namespace testing
}  // namespace tandem
