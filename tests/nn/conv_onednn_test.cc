// The CPU backend's oneDNN convolution (kernels/cpu/nn/conv_onednn.cc) against its plain kernels
// (TANDEM_ONEDNN=0's path) and an f64 reference, on fresh random inputs; that it really ran; and that its
// results do not depend on the thread count.
#include <gtest/gtest.h>

#include "kernels/cpu/nn/conv_onednn.h"
#include "runtime/base/config.h"
#include "runtime/base/parallel_for.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

struct Case {
  const char* what;
  int64_t n, c, h, w, o, k, stride, pad, groups;
  bool bias, channels_last;
};

// Shapes of the model zoo's layers, shrunk, and the odd ones: a batch that does not split evenly, one image,
// a strided 1x1 (its right padding is negative in oneDNN's terms), groups, depthwise, channels-last, and deep
// layers with more weights than activations (split by channels, into unequal pieces for 48).
std::vector<Case> cases() {
  return {
      {"stem 7x7/2", 3, 3, 20, 18, 8, 7, 2, 3, 1, false, false},
      {"3x3", 5, 16, 9, 9, 32, 3, 1, 1, 1, true, false},
      {"3x3/2, one image", 1, 16, 10, 10, 16, 3, 2, 1, 1, false, false},
      {"1x1/2 downsample", 4, 32, 9, 9, 48, 1, 2, 0, 1, false, false},
      {"1x1", 2, 24, 7, 7, 40, 1, 1, 0, 1, true, false},
      {"grouped", 3, 8, 8, 8, 12, 3, 1, 1, 4, true, false},
      {"depthwise", 4, 16, 8, 8, 16, 3, 1, 1, 16, false, false},
      {"depthwise/2", 2, 32, 9, 9, 32, 3, 2, 1, 32, false, false},
      {"3x3 channels-last", 3, 16, 8, 8, 24, 3, 1, 1, 1, true, true},
      {"depthwise channels-last", 2, 8, 7, 7, 8, 3, 2, 1, 8, false, true},
      {"deep 3x3", 2, 32, 4, 4, 48, 3, 1, 1, 1, true, false},
      {"deep 3x3 channels-last", 3, 48, 3, 3, 32, 3, 1, 1, 1, false, true},
      {"deep 1x1, one image", 1, 64, 2, 2, 32, 1, 1, 0, 1, true, false},
  };
}

Conv2dOptions options(const Case& k) {
  Conv2dOptions o;
  o.stride_h = o.stride_w = k.stride;
  o.pad_h = o.pad_w = k.pad;
  o.groups = k.groups;
  return o;
}

// y, dx, dw, db of L = sum(conv2d(x, w, b) * r) with oneDNN on or off.
std::vector<Tensor> run(const Case& k, const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& r,
                        bool onednn) {
  set_cpu_onednn(onednn);
  Tensor xi = x.detach().set_requires_grad();
  Tensor wi = w.detach().set_requires_grad();
  Tensor bi = k.bias ? b.detach().set_requires_grad() : Tensor();
  Tensor y = conv2d(k.channels_last ? to_channels_last(xi) : xi, wi, bi, options(k));
  sum(mul(y, r)).backward();
  set_cpu_onednn(true);
  std::vector<Tensor> out{y.detach(), xi.grad(), wi.grad()};
  if (k.bias) out.push_back(bi.grad());
  return out;
}

// Both paths f32 against an f64 run of the plain kernels: oneDNN within f32 rounding of it, as the plain
// f32 kernels are.
TEST(Conv2dOneDnn, MatchesPlainKernelsAndF64) {
  const char* names[] = {"y", "dx", "dw", "db"};
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.what);
    Generator gen(testing::fresh_seed());
    Tensor x = randn({k.n, k.c, k.h, k.w}, gen, DType::F32);
    Tensor w = randn({k.o, k.c / k.groups, k.k, k.k}, gen, DType::F32);
    Tensor b = randn({k.o}, gen, DType::F32);
    Tensor y_shape = conv2d(x, w, Tensor(), options(k));
    Tensor r = randn(y_shape.shape(), gen, DType::F32);
    auto lib = run(k, x, w, b, r, true);
    auto plain = run(k, x, w, b, r, false);
    auto exact = run(k, x.to(DType::F64), w.to(DType::F64), b.to(DType::F64), r.to(DType::F64), false);
    for (size_t i = 0; i < lib.size(); ++i) {
      Tensor want = exact[i].to(DType::F32);
      testing::expect_close(lib[i], want, 2e-5, std::string("oneDNN ") + names[i]);
      testing::expect_close(plain[i], want, 2e-5, std::string("plain ") + names[i]);
    }
  }
}

// The comparison above would catch a wrong oneDNN descriptor: the strided 1x1 with its windows shifted by one
// pixel (what a mistaken padding gives) is far outside its tolerance.
TEST(Conv2dOneDnn, ToleranceCatchesAShiftedWindow) {
  Generator gen(testing::fresh_seed());
  Tensor x = randn({2, 8, 10, 10}, gen, DType::F32);
  Tensor w = randn({8, 8, 1, 1}, gen, DType::F32);
  Conv2dOptions o;
  o.stride_h = o.stride_w = 2;
  Tensor good = conv2d(x, w, Tensor(), o);
  Tensor shifted = conv2d(x.slice(2, 1, 10).slice(3, 1, 10).contiguous(), w, Tensor(), o);
  ASSERT_EQ(shifted.shape(), good.shape());
  EXPECT_GT(testing::max_rel_error(shifted, good), 100 * 2e-5);
}

// oneDNN really ran each case (no quiet fall-back to the plain kernels behind the comparison above).
TEST(Conv2dOneDnn, RunsEveryCase) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.what);
    Conv2dGeometry g;
    g.channels_last = k.channels_last;
    g.n = k.n, g.c = k.c, g.h = k.h, g.w = k.w, g.o = k.o, g.kh = g.kw = k.k;
    g.stride_h = g.stride_w = k.stride, g.pad_h = g.pad_w = k.pad, g.groups = k.groups;
    g.oh = (k.h + 2 * k.pad - k.k) / k.stride + 1;
    g.ow = (k.w + 2 * k.pad - k.k) / k.stride + 1;
    std::vector<float> x(k.n * k.c * k.h * k.w, 1.f), w(k.o * (k.c / k.groups) * k.k * k.k, 1.f);
    std::vector<float> y(k.n * k.o * g.oh * g.ow), b(k.o, 0.5f);
    EXPECT_TRUE(cpu::onednn_conv_forward(g, x.data(), w.data(), k.bias ? b.data() : nullptr, y.data()));
    EXPECT_TRUE(cpu::onednn_conv_backward_data(g, y.data(), w.data(), x.data()));
    EXPECT_TRUE(cpu::onednn_conv_backward_weight(g, x.data(), y.data(), w.data()));
  }
  set_cpu_onednn(false);
  Conv2dGeometry g;
  g.n = g.c = g.h = g.w = g.o = g.kh = g.kw = g.oh = g.ow = 1;
  float one = 1.f, out = 0.f;
  EXPECT_FALSE(cpu::onednn_conv_forward(g, &one, &one, nullptr, &out));  // switched off: the plain kernels run
  set_cpu_onednn(true);
}

TEST(Conv2dOneDnn, ResultsDoNotDependOnThreadCount) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.what);
    Generator gen(testing::fresh_seed());
    Tensor x = randn({k.n, k.c, k.h, k.w}, gen, DType::F32);
    Tensor w = randn({k.o, k.c / k.groups, k.k, k.k}, gen, DType::F32);
    Tensor b = randn({k.o}, gen, DType::F32);
    Tensor r = randn(conv2d(x, w, Tensor(), options(k)).shape(), gen, DType::F32);
    const int threads = intra_op_threads();
    set_intra_op_threads(1);
    auto one = run(k, x, w, b, r, true);
    set_intra_op_threads(3);
    auto three = run(k, x, w, b, r, true);
    set_intra_op_threads(threads);
    for (size_t i = 0; i < one.size(); ++i) testing::expect_bitwise_equal(one[i], three[i], std::to_string(i));
  }
}

}  // namespace
}  // namespace tandem
