// CUDA kernels write exactly their output: a representative set is called through backend_for(cuda:0) into
// the middle of a sentinel-guarded buffer (tests/kernels' Guarded); the guards must survive and the middle
// must match the CPU backend on the same inputs. GPU only (skipped without one).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/base/config.h"
#include "runtime/tensor/backend.h"
#include "runtime/tensor/ops.h"
#include "tests/kernels/kernel_compare.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {
namespace {

const Device kGpu = Device::cuda(0);

StridedDesc contiguous_desc(const Shape& s) {
  StridedDesc d;
  d.ndim = static_cast<int>(s.size());
  Shape st = contiguous_strides(s);
  for (int i = 0; i < d.ndim; ++i) {
    d.shape[i] = s[i];
    d.strides[i] = st[i];
  }
  return d;
}

// The guarded output's middle on the host, after EXPECTing its guards intact.
Tensor result(const Guarded& g, const std::string& what) {
  g.expect_intact(what);
  return to_host(g.middle());
}

class CudaSentinel : public ::testing::Test {
 protected:
  void SetUp() override {
    TD_REQUIRE_GPU();
    tf32_ = allow_tf32();
    set_allow_tf32(false);
  }
  void TearDown() override {
    if (cuda_available()) set_allow_tf32(tf32_);
  }
  // Random values, flattened (Guarded buffers and their results are 1-D).
  static Tensor host(int64_t n, DType t = DType::F32) { return random_cpu({n}, t, -2, 2); }
  static Tensor indices(int64_t n, int64_t bound) {
    return random_cpu({n}, DType::F64, 0, static_cast<double>(bound)).to(DType::I64);
  }

  bool tf32_ = true;
};

TEST_F(CudaSentinel, FillAndCopy) {
  Shape s{5, 37};
  Guarded out(DType::F32, 185, kGpu);
  gpu_backend().fill({DType::F32, out.data(), contiguous_desc(s), 3.25}, gpu_stream());
  expect_close(result(out, "fill"), full({185}, 3.25), 0.0, "fill");

  Tensor x = host(185), xg = to_gpu(x);
  Guarded half(DType::F16, 185, kGpu, 1);
  gpu_backend().copy({DType::F32, xg.raw_data(), contiguous_desc(s), DType::F16, half.data(), contiguous_desc(s)},
                     gpu_stream());
  expect_bitwise_equal(result(half, "copy f32 -> f16"), x.to(DType::F16), "copy f32 -> f16");
}

TEST_F(CudaSentinel, UnaryAndItsBackward) {
  for (DType t : {DType::F32, DType::F64}) {
    const int64_t n = 1001;
    Tensor x = host(n, t), gy = host(n, t), y = empty({n}, t), gx = empty({n}, t);
    Tensor xg = to_gpu(x), gyg = to_gpu(gy);
    Guarded out(t, n, kGpu);
    gpu_backend().unary({UnaryOp::Sigmoid, t, xg.raw_data(), out.data(), n, {}}, gpu_stream());
    cpu_backend().unary({UnaryOp::Sigmoid, t, x.raw_data(), y.raw_data(), n, {}}, Stream());
    expect_close(result(out, "sigmoid"), y, tolerance(t), "sigmoid");
    Tensor yg = to_gpu(y);
    Guarded grad(t, n, kGpu, 3);
    gpu_backend().unary_backward({UnaryOp::Tanh, t, nullptr, yg.raw_data(), gyg.raw_data(), grad.data(), n, {}},
                                 gpu_stream());
    cpu_backend().unary_backward({UnaryOp::Tanh, t, nullptr, y.raw_data(), gy.raw_data(), gx.raw_data(), n, {}},
                                 Stream());
    expect_close(result(grad, "tanh backward"), gx, tolerance(t), "tanh backward");
  }
}

TEST_F(CudaSentinel, BroadcastBinaryComparisonAndWhere) {
  Shape s{5, 7};
  Tensor a = host(35), b = host(7), prod = empty({35}), cmp = empty({35}, DType::U8), sel = empty({35});
  Tensor ag = to_gpu(a), bg = to_gpu(b);
  StridedDesc od = contiguous_desc(s), bd = od;
  bd.strides[0] = 0;  // b broadcast over the rows
  Guarded out(DType::F32, 35, kGpu);
  gpu_backend().binary({BinaryOp::Mul, DType::F32, ag.raw_data(), od, bg.raw_data(), bd, out.data(), od}, gpu_stream());
  cpu_backend().binary({BinaryOp::Mul, DType::F32, a.raw_data(), od, b.raw_data(), bd, prod.raw_data(), od}, Stream());
  expect_close(result(out, "mul"), prod, tolerance(DType::F32), "mul");
  Guarded lt(DType::U8, 35, kGpu, 5);
  gpu_backend().binary({BinaryOp::Lt, DType::F32, ag.raw_data(), od, bg.raw_data(), bd, lt.data(), od}, gpu_stream());
  cpu_backend().binary({BinaryOp::Lt, DType::F32, a.raw_data(), od, b.raw_data(), bd, cmp.raw_data(), od}, Stream());
  expect_bitwise_equal(result(lt, "lt"), cmp, "lt");
  Tensor cg = to_gpu(cmp);
  Guarded w(DType::F32, 35, kGpu);
  gpu_backend().where({cg.raw_data(), od, DType::F32, ag.raw_data(), od, bg.raw_data(), bd, w.data(), od},
                      gpu_stream());
  cpu_backend().where({cmp.raw_data(), od, DType::F32, a.raw_data(), od, b.raw_data(), bd, sel.raw_data(), od},
                      Stream());
  expect_bitwise_equal(result(w, "where"), sel, "where");
}

TEST_F(CudaSentinel, ReductionsWithIndices) {
  for (DType t : {DType::F32, DType::F64}) {
    const int64_t outer = 3, r = 50, inner = 4, n = outer * inner;
    Tensor x = host(outer * r * inner, t), want = empty({n}, t), want_idx = empty({n}, DType::I64);
    Tensor xg = to_gpu(x);
    Guarded sum_out(t, n, kGpu);
    gpu_backend().reduce({ReduceOp::Sum, t, xg.raw_data(), outer, r, inner, sum_out.data(), nullptr}, gpu_stream());
    cpu_backend().reduce({ReduceOp::Sum, t, x.raw_data(), outer, r, inner, want.raw_data(), nullptr}, Stream());
    expect_close(result(sum_out, "sum"), want, tolerance(t), "sum");
    Guarded max_out(t, n, kGpu), idx_out(DType::I64, n, kGpu);
    gpu_backend().reduce(
        {ReduceOp::Max, t, xg.raw_data(), outer, r, inner, max_out.data(), static_cast<int64_t*>(idx_out.data())},
        gpu_stream());
    cpu_backend().reduce({ReduceOp::Max, t, x.raw_data(), outer, r, inner, want.raw_data(), want_idx.data<int64_t>()},
                         Stream());
    expect_bitwise_equal(result(max_out, "max"), want, "max");
    expect_bitwise_equal(result(idx_out, "argmax"), want_idx, "argmax");
  }
}

TEST_F(CudaSentinel, SoftmaxAndBackward) {
  for (bool log : {false, true}) {
    DType t = log ? DType::F64 : DType::F32;
    const int64_t outer = 2, n = 33, inner = 3, total = outer * n * inner;
    Tensor x = host(total, t), gy = host(total, t), y = empty({total}, t), gx = empty({total}, t);
    Tensor xg = to_gpu(x), gyg = to_gpu(gy);
    Guarded out(t, total, kGpu), grad(t, total, kGpu);
    gpu_backend().softmax({log, t, xg.raw_data(), out.data(), outer, n, inner}, gpu_stream());
    cpu_backend().softmax({log, t, x.raw_data(), y.raw_data(), outer, n, inner}, Stream());
    expect_close(result(out, "softmax"), y, tolerance(t), log ? "log_softmax" : "softmax");
    Tensor yg = to_gpu(y);
    gpu_backend().softmax_backward({log, t, yg.raw_data(), gyg.raw_data(), grad.data(), outer, n, inner}, gpu_stream());
    cpu_backend().softmax_backward({log, t, y.raw_data(), gy.raw_data(), gx.raw_data(), outer, n, inner}, Stream());
    expect_close(result(grad, "softmax backward"), gx, tolerance(t), "softmax backward");
  }
}

TEST_F(CudaSentinel, BatchedGemmWithTransposedB) {
  for (DType t : {DType::F32, DType::F64}) {
    const int64_t batch = 2, m = 5, n = 17, k = 9;
    Tensor a = host(batch * m * k, t), b = host(batch * n * k, t), want = empty({batch * m * n}, t);
    Tensor ag = to_gpu(a), bg = to_gpu(b);
    Guarded c(t, batch * m * n, kGpu);
    gpu_backend().gemm({t, false, true, m, n, k, 1.0, ag.raw_data(), k, m * k, bg.raw_data(), k, n * k, 0.0, c.data(),
                        n, m * n, batch},
                       gpu_stream());
    cpu_backend().gemm({t, false, true, m, n, k, 1.0, a.raw_data(), k, m * k, b.raw_data(), k, n * k, 0.0,
                        want.raw_data(), n, m * n, batch},
                       Stream());
    expect_close(result(c, "gemm"), want, tolerance(t), "gemm");
  }
}

// The args struct of a Backend method, for a test running methods whose args have the same fields.
template <class Args>
Args args_of(void (Backend::*)(const Args&, const Stream&));

TEST_F(CudaSentinel, IndexingAndItsAccumulatingBackwards) {
  const int64_t outer = 3, n_src = 6, inner = 5, n_idx = 8, n_out = outer * n_idx * inner, n_in = outer * n_src * inner;
  // index_select and index_add take n_idx indices into the n_src rows; gather and scatter_add one per element.
  Tensor x = host(n_in, DType::F64), idx = indices(n_idx, n_src), gidx = indices(n_out, n_src);
  Tensor src = host(n_out, DType::F64), base = host(n_in, DType::F64);
  Tensor xg = to_gpu(x), srcg = to_gpu(src), idxg = to_gpu(idx), gidxg = to_gpu(gidx);
  // The reads give x's values at the indices: the same bits.
  auto read = [&](const char* name, auto op, const Tensor& i, const Tensor& i_gpu) {
    using Args = decltype(args_of(op));
    Tensor want = empty({n_out}, DType::F64);
    Guarded got(DType::F64, n_out, kGpu);
    (gpu_backend().*op)(Args{DType::F64, xg.raw_data(), outer, n_src, inner, i_gpu.data<int64_t>(), n_idx, got.data()},
                        gpu_stream());
    (cpu_backend().*op)(Args{DType::F64, x.raw_data(), outer, n_src, inner, i.data<int64_t>(), n_idx, want.raw_data()},
                        Stream());
    expect_bitwise_equal(result(got, name), want, name);
  };
  read("index_select", &Backend::index_select, idx, idxg);
  read("gather", &Backend::gather, gidx, gidxg);

  // Their backwards add src into a copy of base at the same indices.
  auto add = [&](const char* name, auto op, const Tensor& i, const Tensor& i_gpu) {
    using Args = decltype(args_of(op));
    Tensor want = base.clone();
    Guarded got(DType::F64, n_in, kGpu);
    got.load(base);
    (gpu_backend().*op)(
        Args{DType::F64, srcg.raw_data(), outer, n_idx, inner, i_gpu.data<int64_t>(), n_src, got.data()}, gpu_stream());
    (cpu_backend().*op)(
        Args{DType::F64, src.raw_data(), outer, n_idx, inner, i.data<int64_t>(), n_src, want.raw_data()}, Stream());
    expect_close(result(got, name), want, 1e-12, name);
  };
  add("index_add", &Backend::index_add, idx, idxg);
  add("scatter_add", &Backend::scatter_add, gidx, gidxg);
}

TEST_F(CudaSentinel, OneHotAndRandom) {
  Tensor labels = indices(13, 7), labels_g = to_gpu(labels);
  Guarded oh(DType::F32, 13 * 7, kGpu);
  gpu_backend().one_hot({labels_g.data<int64_t>(), 13, 7, DType::F32, oh.data()}, gpu_stream());
  expect_bitwise_equal(result(oh, "one_hot"), one_hot(labels, 7).reshape({-1}), "one_hot");

  const uint64_t seed = fresh_seed();
  for (DType t : {DType::F32, DType::F64}) {
    for (RandomSpec spec : {RandomSpec{true, 0.5, 2.0}, RandomSpec{false, -1.0, 3.0}}) {
      Tensor want = empty({1001}, t);
      Guarded r(t, 1001, kGpu);
      gpu_backend().random({t, r.data(), 1001, seed, 17, spec}, gpu_stream());
      cpu_backend().random({t, want.raw_data(), 1001, seed, 17, spec}, Stream());
      expect_bitwise_equal(result(r, "random"), want, spec.normal ? "normal" : "uniform");
    }
  }
}

}  // namespace
}  // namespace testing
}  // namespace tandem
