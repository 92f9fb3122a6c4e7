// CUDA kernels write exactly their output: each is called through backend_for(cuda:0) into the middle of a
// buffer whose guard elements before and after hold a sentinel byte pattern; the guards must survive and
// the middle must match the CPU backend on the same inputs. GPU only (skipped without one).
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "runtime/backend.h"
#include "runtime/config.h"
#include "runtime/error.h"
#include "runtime/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using tandem::testing::expect_bitwise_equal;
using tandem::testing::expect_close;
using tandem::testing::fresh_seed;

constexpr int64_t kGuard = 64;    // guard elements on each side
constexpr double kSentinel = 0xA5;  // every guard byte

const Device kGpu = Device::cuda(0);

Backend& gpu() { return backend_for(kGpu); }
Backend& cpu() { return backend_for(Device::cpu()); }
Stream gpu_stream() { return current_stream(kGpu); }

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

// n elements of dtype t on the GPU between two guards of sentinel bytes.
class Guarded {
 public:
  Guarded(DType t, const Shape& shape)
      : t_(t), shape_(shape), elem_(static_cast<int64_t>(dtype_size(t))), n_(shape_numel(shape)) {
    buf_ = full({(n_ + 2 * kGuard) * elem_}, kSentinel, TensorOptions(DType::U8).with_device(kGpu));
  }
  void* data() const { return static_cast<char*>(buf_.raw_data()) + kGuard * elem_; }
  // Sets the middle to `values` (a CPU tensor of this dtype and shape), for kernels that accumulate.
  void set(const Tensor& values) {
    Tensor c = values.contiguous();
    Tensor bytes = empty({n_ * elem_}, DType::U8);
    std::memcpy(bytes.raw_data(), c.raw_data(), static_cast<size_t>(n_ * elem_));
    buf_.narrow(0, kGuard * elem_, n_ * elem_).copy_(bytes.to(kGpu));
  }
  // The middle as a CPU tensor, after EXPECTing that no guard byte changed.
  Tensor result(const std::string& what) const {
    Tensor host = buf_.to(Device::cpu());
    const uint8_t* p = host.data<uint8_t>();
    int64_t guard_bytes = kGuard * elem_, total = host.numel(), bad = 0;
    for (int64_t i = 0; i < guard_bytes; ++i) bad += p[i] != 0xA5;
    for (int64_t i = guard_bytes + n_ * elem_; i < total; ++i) bad += p[i] != 0xA5;
    EXPECT_EQ(bad, 0) << what << ": " << bad << " guard bytes overwritten";
    Tensor out = empty(shape_, t_);
    std::memcpy(out.raw_data(), p + guard_bytes, static_cast<size_t>(n_ * elem_));
    return out;
  }

 private:
  DType t_;
  Shape shape_;
  int64_t elem_, n_;
  Tensor buf_;
};

double tol(DType t) { return t == DType::F32 ? 1e-5 : 1e-12; }

class CudaSentinel : public ::testing::Test {
 protected:
  void SetUp() override {
    TD_REQUIRE_GPU();
    tf32_ = allow_tf32();
    set_allow_tf32(false);
    gen_ = Generator(fresh_seed());
  }
  void TearDown() override {
    if (cuda_available()) set_allow_tf32(tf32_);
  }
  Tensor host(const Shape& s, DType t = DType::F32) { return randn(s, gen_, t); }
  Tensor indices(const Shape& s, int64_t bound) {
    std::vector<int64_t> v(static_cast<size_t>(shape_numel(s)));
    for (int64_t& x : v) x = static_cast<int64_t>(gen_.integer(static_cast<uint64_t>(bound)));
    return from_vector<int64_t>(v, s);
  }
  static Tensor on_gpu(const Tensor& t) { return t.contiguous().to(kGpu); }

  Generator gen_;
  bool tf32_ = true;
};

TEST_F(CudaSentinel, FillAndCopy) {
  Shape s{5, 37};
  Guarded out(DType::F32, s);
  gpu().fill(DType::F32, out.data(), contiguous_desc(s), 3.25, gpu_stream());
  expect_close(out.result("fill"), full(s, 3.25), 0.0, "fill");

  Tensor x = host(s);
  Tensor xg = on_gpu(x);
  Guarded half(DType::F16, s);
  gpu().copy(DType::F32, xg.raw_data(), contiguous_desc(s), DType::F16, half.data(), contiguous_desc(s), gpu_stream());
  expect_bitwise_equal(half.result("copy f32 -> f16"), x.to(DType::F16), "copy f32 -> f16");
}

TEST_F(CudaSentinel, UnaryAndItsBackward) {
  for (DType t : {DType::F32, DType::F64}) {
    Shape s{1001};
    Tensor x = host(s, t), gy = host(s, t), y = empty(s, t), want = empty(s, t);
    Tensor xg = on_gpu(x), gyg = on_gpu(gy);
    Guarded out(t, s);
    gpu().unary(UnaryOp::Sigmoid, t, xg.raw_data(), out.data(), 1001, {}, gpu_stream());
    cpu().unary(UnaryOp::Sigmoid, t, x.raw_data(), y.raw_data(), 1001, {}, Stream());
    expect_close(out.result("sigmoid"), y, tol(t), "sigmoid");
    Tensor yg = on_gpu(y);
    Guarded gx(t, s);
    gpu().unary_backward(UnaryOp::Tanh, t, nullptr, yg.raw_data(), gyg.raw_data(), gx.data(), 1001, {}, gpu_stream());
    cpu().unary_backward(UnaryOp::Tanh, t, nullptr, y.raw_data(), gy.raw_data(), want.raw_data(), 1001, {}, Stream());
    expect_close(gx.result("tanh backward"), want, tol(t), "tanh backward");
  }
}

TEST_F(CudaSentinel, BinaryWithBroadcastAndComparison) {
  Shape s{5, 7};
  Tensor a = host(s), b = host({7}), want = empty(s), cmp = empty(s, DType::U8);
  Tensor ag = on_gpu(a), bg = on_gpu(b);
  StridedDesc od = contiguous_desc(s), ad = od, bd = od;
  bd.strides[0] = 0;
  Guarded out(DType::F32, s);
  gpu().binary(BinaryOp::Mul, DType::F32, ag.raw_data(), ad, bg.raw_data(), bd, out.data(), od, gpu_stream());
  cpu().binary(BinaryOp::Mul, DType::F32, a.raw_data(), ad, b.raw_data(), bd, want.raw_data(), od, Stream());
  expect_close(out.result("mul"), want, 1e-6, "mul");
  Guarded lt(DType::U8, s);
  gpu().binary(BinaryOp::Lt, DType::F32, ag.raw_data(), ad, bg.raw_data(), bd, lt.data(), od, gpu_stream());
  cpu().binary(BinaryOp::Lt, DType::F32, a.raw_data(), ad, b.raw_data(), bd, cmp.raw_data(), od, Stream());
  expect_bitwise_equal(lt.result("lt"), cmp, "lt");
}

TEST_F(CudaSentinel, Where) {
  Shape s{4, 9};
  Tensor c = gt(host(s), zeros({})), a = host(s), b = host(s), want = empty(s);
  Tensor cg = on_gpu(c), ag = on_gpu(a), bg = on_gpu(b);
  StridedDesc d = contiguous_desc(s);
  Guarded out(DType::F32, s);
  gpu().where(cg.raw_data(), d, DType::F32, ag.raw_data(), d, bg.raw_data(), d, out.data(), d, gpu_stream());
  cpu().where(c.raw_data(), d, DType::F32, a.raw_data(), d, b.raw_data(), d, want.raw_data(), d, Stream());
  expect_bitwise_equal(out.result("where"), want, "where");
}

TEST_F(CudaSentinel, ReductionsWithIndices) {
  for (DType t : {DType::F32, DType::F64}) {
    int64_t outer = 3, r = 50, inner = 4;
    Tensor x = host({outer, r, inner}, t), want = empty({outer, inner}, t), want_idx = empty({outer, inner}, DType::I64);
    Tensor xg = on_gpu(x);
    Guarded sum_out(t, {outer, inner});
    gpu().reduce(ReduceOp::Sum, t, xg.raw_data(), outer, r, inner, sum_out.data(), nullptr, gpu_stream());
    cpu().reduce(ReduceOp::Sum, t, x.raw_data(), outer, r, inner, want.raw_data(), nullptr, Stream());
    expect_close(sum_out.result("sum"), want, tol(t), "sum");
    Guarded max_out(t, {outer, inner}), idx_out(DType::I64, {outer, inner});
    gpu().reduce(ReduceOp::Max, t, xg.raw_data(), outer, r, inner, max_out.data(), static_cast<int64_t*>(idx_out.data()),
                 gpu_stream());
    cpu().reduce(ReduceOp::Max, t, x.raw_data(), outer, r, inner, want.raw_data(), want_idx.data<int64_t>(), Stream());
    expect_bitwise_equal(max_out.result("max"), want, "max");
    expect_bitwise_equal(idx_out.result("argmax"), want_idx, "argmax");
  }
}

TEST_F(CudaSentinel, SoftmaxAndBackward) {
  for (bool log : {false, true}) {
    DType t = log ? DType::F64 : DType::F32;
    int64_t outer = 2, n = 33, inner = 3;
    Shape s{outer, n, inner};
    Tensor x = host(s, t), gy = host(s, t), y = empty(s, t), gx = empty(s, t);
    Tensor xg = on_gpu(x), gyg = on_gpu(gy);
    Guarded out(t, s), gout(t, s);
    gpu().softmax(log, t, xg.raw_data(), out.data(), outer, n, inner, gpu_stream());
    cpu().softmax(log, t, x.raw_data(), y.raw_data(), outer, n, inner, Stream());
    expect_close(out.result("softmax"), y, tol(t), log ? "log_softmax" : "softmax");
    Tensor yg = on_gpu(y);
    gpu().softmax_backward(log, t, yg.raw_data(), gyg.raw_data(), gout.data(), outer, n, inner, gpu_stream());
    cpu().softmax_backward(log, t, y.raw_data(), gy.raw_data(), gx.raw_data(), outer, n, inner, Stream());
    expect_close(gout.result("softmax backward"), gx, tol(t), "softmax backward");
  }
}

TEST_F(CudaSentinel, BatchedGemmWithTransposedB) {
  for (DType t : {DType::F32, DType::F64}) {
    int64_t batch = 2, m = 5, n = 17, k = 9;
    Tensor a = host({batch, m, k}, t), b = host({batch, n, k}, t), want = empty({batch, m, n}, t);
    Tensor ag = on_gpu(a), bg = on_gpu(b);
    Guarded c(t, {batch, m, n});
    gpu().gemm(t, false, true, m, n, k, 1.0, ag.raw_data(), k, m * k, bg.raw_data(), k, n * k, 0.0, c.data(), n, m * n,
               batch, gpu_stream());
    cpu().gemm(t, false, true, m, n, k, 1.0, a.raw_data(), k, m * k, b.raw_data(), k, n * k, 0.0, want.raw_data(), n,
               m * n, batch, Stream());
    expect_close(c.result("gemm"), want, tol(t), "gemm");
  }
}

TEST_F(CudaSentinel, IndexSelectGatherAndTheirAccumulatingBackwards) {
  int64_t outer = 3, n_src = 6, inner = 5, n_idx = 8;
  Tensor x = host({outer, n_src, inner}, DType::F64);
  Tensor idx = indices({n_idx}, n_src), gidx = indices({outer, n_idx, inner}, n_src);
  Tensor xg = on_gpu(x), idxg = on_gpu(idx), gidxg = on_gpu(gidx);
  Tensor want = empty({outer, n_idx, inner}, DType::F64);

  Guarded sel(DType::F64, {outer, n_idx, inner});
  gpu().index_select(DType::F64, xg.raw_data(), outer, n_src, inner, idxg.data<int64_t>(), n_idx, sel.data(),
                     gpu_stream());
  cpu().index_select(DType::F64, x.raw_data(), outer, n_src, inner, idx.data<int64_t>(), n_idx, want.raw_data(),
                     Stream());
  expect_bitwise_equal(sel.result("index_select"), want, "index_select");

  Guarded gat(DType::F64, {outer, n_idx, inner});
  gpu().gather(DType::F64, xg.raw_data(), outer, n_src, inner, gidxg.data<int64_t>(), n_idx, gat.data(), gpu_stream());
  cpu().gather(DType::F64, x.raw_data(), outer, n_src, inner, gidx.data<int64_t>(), n_idx, want.raw_data(), Stream());
  expect_bitwise_equal(gat.result("gather"), want, "gather");

  Tensor src = host({outer, n_idx, inner}, DType::F64), srcg = on_gpu(src);
  Tensor base = host({outer, n_src, inner}, DType::F64);
  Tensor acc = base.clone();
  Guarded added(DType::F64, {outer, n_src, inner});
  added.set(base);
  gpu().index_add(DType::F64, srcg.raw_data(), outer, n_idx, inner, idxg.data<int64_t>(), n_src, added.data(),
                  gpu_stream());
  cpu().index_add(DType::F64, src.raw_data(), outer, n_idx, inner, idx.data<int64_t>(), n_src, acc.raw_data(), Stream());
  expect_close(added.result("index_add"), acc, 1e-12, "index_add");

  acc = base.clone();
  Guarded scattered(DType::F64, {outer, n_src, inner});
  scattered.set(base);
  gpu().scatter_add(DType::F64, srcg.raw_data(), outer, n_idx, inner, gidxg.data<int64_t>(), n_src, scattered.data(),
                    gpu_stream());
  cpu().scatter_add(DType::F64, src.raw_data(), outer, n_idx, inner, gidx.data<int64_t>(), n_src, acc.raw_data(),
                    Stream());
  expect_close(scattered.result("scatter_add"), acc, 1e-12, "scatter_add");
}

TEST_F(CudaSentinel, OneHotAndRandom) {
  Tensor labels = indices({13}, 7), labels_g = on_gpu(labels);
  Guarded oh(DType::F32, {13, 7});
  gpu().one_hot(labels_g.data<int64_t>(), 13, 7, DType::F32, oh.data(), gpu_stream());
  expect_bitwise_equal(oh.result("one_hot"), one_hot(labels, 7), "one_hot");

  uint64_t seed = gen_.integer(1u << 30);
  for (DType t : {DType::F32, DType::F64}) {
    Tensor want = empty({1001}, t);
    Guarded r(t, {1001});
    RandomSpec normal{true, 0.5, 2.0};
    gpu().random(t, r.data(), 1001, seed, 17, normal, gpu_stream());
    cpu().random(t, want.raw_data(), 1001, seed, 17, normal, Stream());
    expect_bitwise_equal(r.result("random"), want, "normal random");
  }
}

}  // namespace
}  // namespace tandem
