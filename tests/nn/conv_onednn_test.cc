// The CPU backend's oneDNN convolution (kernels/cpu/nn/conv_onednn.cc, with the im2col + GEMM path of
// conv_gemm.cc it hands small planes to) against its plain kernels (TANDEM_ONEDNN=0's path) and an f64
// reference, on fresh random inputs; that it really ran; and that its results do not depend on the thread count.
#include <gtest/gtest.h>

#include <utility>
#include <vector>

#include "kernels/cpu/nn/conv_gemm.h"
#include "kernels/cpu/nn/conv_onednn.h"
#include "kernels/cpu/nn/conv_path.h"
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
// layers with more weights than activations (split by channels, into unequal pieces for 48), and the planes
// the GEMM path takes (2x2 and 1x1 planes, a strided 1x1).
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
      {"3x3 on 2x2 (GEMM)", 3, 64, 2, 2, 32, 3, 1, 1, 1, true, false},
      {"3x3/2 to 1x1 (GEMM)", 5, 32, 2, 2, 48, 3, 2, 1, 1, false, false},
      {"3x3 on 1x1, mostly padding", 4, 32, 1, 1, 16, 3, 1, 1, 1, true, false},
      {"strided 1x1 (GEMM)", 2, 64, 6, 6, 32, 1, 2, 0, 1, false, false},
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

// Fresh random f32 inputs of a case: x, w, b and the output's weights r of L = sum(conv2d(x, w, b) * r).
struct Inputs {
  Tensor x, w, b, r;
};
Inputs random_inputs(const Case& k) {
  Generator gen(testing::fresh_seed());
  Inputs in;
  in.x = randn({k.n, k.c, k.h, k.w}, gen, DType::F32);
  in.w = randn({k.o, k.c / k.groups, k.k, k.k}, gen, DType::F32);
  in.b = randn({k.o}, gen, DType::F32);
  in.r = randn(conv2d(in.x, in.w, Tensor(), options(k)).shape(), gen, DType::F32);
  return in;
}

// fn's results at 1 and at 3 intra-op threads.
template <typename Fn>
std::pair<std::vector<Tensor>, std::vector<Tensor>> at_one_and_three_threads(Fn fn) {
  const int threads = intra_op_threads();
  set_intra_op_threads(1);
  auto one = fn();
  set_intra_op_threads(3);
  auto three = fn();
  set_intra_op_threads(threads);
  return {one, three};
}

// Both paths f32 against an f64 run of the plain kernels: oneDNN within f32 rounding of it, as the plain
// f32 kernels are.
TEST(Conv2dOneDnn, MatchesPlainKernelsAndF64) {
  const char* names[] = {"y", "dx", "dw", "db"};
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.what);
    const Inputs in = random_inputs(k);
    auto lib = run(k, in.x, in.w, in.b, in.r, true);
    auto plain = run(k, in.x, in.w, in.b, in.r, false);
    auto exact = run(k, in.x.to(DType::F64), in.w.to(DType::F64), in.b.to(DType::F64), in.r.to(DType::F64), false);
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

Conv2dGeometry geometry(const Case& k) {
  Conv2dGeometry g;
  g.channels_last = k.channels_last;
  g.n = k.n, g.c = k.c, g.h = k.h, g.w = k.w, g.o = k.o, g.kh = g.kw = k.k;
  g.stride_h = g.stride_w = k.stride, g.pad_h = g.pad_w = k.pad, g.groups = k.groups;
  g.oh = (k.h + 2 * k.pad - k.k) / k.stride + 1;
  g.ow = (k.w + 2 * k.pad - k.k) / k.stride + 1;
  return g;
}

// oneDNN (or the GEMM path) is the path of every case and pass (no quiet fall-back to the plain kernels behind
// the comparison above), and each runs directly; switched off, or in f64, the plain kernels take every case:
// the direct one exactly where each output channel reads one input channel.
TEST(Conv2dOneDnn, RunsEveryCase) {
  using cpu::ConvPass;
  using cpu::CpuConvPath;
  const ConvPass passes[] = {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight};
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.what);
    Conv2dGeometry g = geometry(k);
    for (ConvPass pass : passes) {
      const CpuConvPath path = cpu::select_cpu_conv_path(g, pass, k.bias);
      EXPECT_TRUE(path == CpuConvPath::onednn || path == CpuConvPath::gemm)
          << "pass " << static_cast<int>(pass) << ": " << cpu::cpu_conv_path_name(path);
    }
    std::vector<float> x(k.n * k.c * k.h * k.w, 1.f), w(k.o * (k.c / k.groups) * k.k * k.k, 1.f);
    std::vector<float> y(k.n * k.o * g.oh * g.ow), b(k.o, 0.5f);
    if (cpu::select_cpu_conv_path(g, ConvPass::forward, k.bias) == CpuConvPath::onednn)
      cpu::onednn_conv_forward(g, x.data(), w.data(), k.bias ? b.data() : nullptr, y.data());
    if (cpu::select_cpu_conv_path(g, ConvPass::backward_data, false) == CpuConvPath::onednn)
      cpu::onednn_conv_backward_data(g, y.data(), w.data(), x.data());
    if (cpu::select_cpu_conv_path(g, ConvPass::backward_weight, false) == CpuConvPath::onednn)
      cpu::onednn_conv_backward_weight(g, x.data(), y.data(), w.data());
    const CpuConvPath plain = k.groups == k.c ? CpuConvPath::direct : CpuConvPath::im2col;
    set_cpu_onednn(false);
    for (ConvPass pass : passes) EXPECT_EQ(cpu::select_cpu_conv_path(g, pass, k.bias), plain);
    set_cpu_onednn(true);
    g.dtype = DType::F64;
    for (ConvPass pass : passes) EXPECT_EQ(cpu::select_cpu_conv_path(g, pass, k.bias), plain);
  }
}

// bf16 (no bias: conv2d adds it after rounding) takes oneDNN's native kernels exactly where cpu_native_bf16() says
// the processor has them, and the widened f32 path otherwise or with oneDNN off.
TEST(Conv2dOneDnn, Bf16TakesNativeKernelsWhereTheProcessorHasThem) {
  using cpu::ConvPass;
  using cpu::CpuConvPath;
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.what);
    Conv2dGeometry g = geometry(k);
    g.dtype = DType::BF16;
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight}) {
      EXPECT_EQ(cpu::select_cpu_conv_path(g, pass, false),
                cpu_native_bf16() ? CpuConvPath::onednn : CpuConvPath::widened);
      set_cpu_onednn(false);
      EXPECT_FALSE(cpu_native_bf16());
      EXPECT_EQ(cpu::select_cpu_conv_path(g, pass, false), CpuConvPath::widened);
      set_cpu_onednn(true);
    }
  }
}

// The rule of conv_gemm.h, pass by pass, on the shapes it was measured on and the ones it leaves out.
TEST(Conv2dGemm, TakesTheSmallPlanesItWasMeasuredOn) {
  using cpu::ConvPass;
  auto takes = [](const Case& k, ConvPass pass, DType dtype = DType::F32) {
    Conv2dGeometry g = geometry(k);
    g.dtype = dtype;
    return cpu::conv_gemm_applies(g, pass);
  };
  const Case layer4{"ResNet layer4 at 64x64", 64, 512, 2, 2, 512, 3, 1, 1, 1, false, false};
  EXPECT_TRUE(takes(layer4, ConvPass::backward_weight));
  EXPECT_FALSE(takes(layer4, ConvPass::forward));  // 256 output pixels in the batch
  EXPECT_FALSE(takes(layer4, ConvPass::backward_data));
  const Case small_batch{"the same at batch 8", 8, 512, 2, 2, 512, 3, 1, 1, 1, false, false};
  EXPECT_TRUE(takes(small_batch, ConvPass::forward));
  EXPECT_TRUE(takes(small_batch, ConvPass::backward_data));
  EXPECT_FALSE(takes(small_batch, ConvPass::forward, DType::F64));
  const Case padding{"3x3 on 1x1", 8, 512, 1, 1, 512, 3, 1, 1, 1, false, false};
  EXPECT_TRUE(takes(padding, ConvPass::backward_weight));
  EXPECT_FALSE(takes(padding, ConvPass::forward));  // 8 of 9 columns would be zeros
  const Case downsample{"strided 1x1", 64, 256, 16, 16, 512, 1, 2, 0, 1, false, false};
  EXPECT_TRUE(takes(downsample, ConvPass::backward_weight));
  EXPECT_FALSE(takes(downsample, ConvPass::forward));
  const Case pointwise{"1x1 on 2x2", 8, 1024, 2, 2, 256, 1, 1, 0, 1, false, false};
  EXPECT_TRUE(takes(pointwise, ConvPass::backward_weight));
  EXPECT_TRUE(takes(pointwise, ConvPass::forward));
  for (const Case& k : {Case{"1x1 on 8x8", 8, 64, 8, 8, 64, 1, 1, 0, 1, false, false},
                        Case{"large plane", 8, 64, 16, 16, 64, 3, 1, 1, 1, false, false},
                        Case{"groups", 8, 64, 2, 2, 64, 3, 1, 1, 2, false, false},
                        Case{"channels-last", 8, 64, 2, 2, 64, 3, 1, 1, 1, false, true}})
    for (ConvPass pass : {ConvPass::forward, ConvPass::backward_data, ConvPass::backward_weight})
      EXPECT_FALSE(takes(k, pass)) << k.what << " pass " << static_cast<int>(pass);
}

// The GEMM path run directly, with every option (rectangular kernels, strides, padding, dilation) and chunk
// budgets that give one image per chunk, a ragged last chunk and the whole batch in one, against the f64
// plain kernels; and bitwise the same at 1 and 3 threads.
TEST(Conv2dGemm, MatchesF64InEveryChunking) {
  struct Shape {
    const char* what;
    int64_t n, c, h, w, o, kh, kw;
    Conv2dOptions opt;
  };
  auto opt = [](int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw) {
    Conv2dOptions o;
    o.stride_h = sh, o.stride_w = sw, o.pad_h = ph, o.pad_w = pw, o.dilation_h = dh, o.dilation_w = dw;
    return o;
  };
  const Shape shapes[] = {
      {"3x3 padded", 5, 6, 4, 3, 7, 3, 3, opt(1, 1, 1, 1, 1, 1)},
      {"rectangular, strided", 5, 3, 7, 6, 4, 3, 2, opt(2, 1, 0, 1, 1, 1)},
      {"dilated", 5, 2, 7, 7, 3, 3, 3, opt(1, 2, 2, 1, 2, 2)},
      {"strided 1x1", 5, 8, 5, 5, 6, 1, 1, opt(2, 2, 0, 0, 1, 1)},
      {"1x1", 5, 8, 2, 3, 6, 1, 1, opt(1, 1, 0, 0, 1, 1)},
  };
  for (const Shape& k : shapes) {
    SCOPED_TRACE(k.what);
    Generator gen(testing::fresh_seed());
    Tensor x = randn({k.n, k.c, k.h, k.w}, gen, DType::F32);
    Tensor w = randn({k.o, k.c, k.kh, k.kw}, gen, DType::F32);
    Tensor b = randn({k.o}, gen, DType::F32);
    Tensor x64 = x.to(DType::F64).set_requires_grad(), w64 = w.to(DType::F64).set_requires_grad();
    Tensor y64 = conv2d(x64, w64, b.to(DType::F64), k.opt);
    Tensor dy = randn(y64.shape(), gen, DType::F32);
    sum(mul(y64, dy.to(DType::F64))).backward();
    Conv2dGeometry g;
    g.n = k.n, g.c = k.c, g.h = k.h, g.w = k.w, g.o = k.o, g.kh = k.kh, g.kw = k.kw, g.oh = y64.shape()[2],
    g.ow = y64.shape()[3];
    g.stride_h = k.opt.stride_h, g.stride_w = k.opt.stride_w, g.pad_h = k.opt.pad_h, g.pad_w = k.opt.pad_w;
    g.dilation_h = k.opt.dilation_h, g.dilation_w = k.opt.dilation_w;
    const int64_t per_image = k.c * k.kh * k.kw * g.oh * g.ow;
    for (int64_t chunk : {per_image, 2 * per_image, cpu::kConvGemmChunkFloats}) {
      SCOPED_TRACE("chunk of " + std::to_string(chunk) + " floats");
      auto run = [&] {
        Tensor y = empty(y64.shape(), DType::F32), dx = empty(x.shape(), DType::F32);
        Tensor dw = empty(w.shape(), DType::F32);
        cpu::conv_gemm_forward(g, x.data<float>(), w.data<float>(), b.data<float>(), y.data<float>(), chunk);
        cpu::conv_gemm_backward_data(g, dy.data<float>(), w.data<float>(), dx.data<float>(), chunk);
        cpu::conv_gemm_backward_weight(g, x.data<float>(), dy.data<float>(), dw.data<float>(), chunk);
        return std::vector<Tensor>{y, dx, dw};
      };
      auto [one, three] = at_one_and_three_threads(run);
      const Tensor want[] = {y64.detach(), x64.grad(), w64.grad()};
      for (int i = 0; i < 3; ++i) {
        testing::expect_close(one[i], want[i].to(DType::F32), 2e-5, std::to_string(i));
        testing::expect_bitwise_equal(one[i], three[i], std::to_string(i));
      }
    }
  }
}

// The comparison above catches a lost chunk: the weight gradient of all images but the last is far outside
// its tolerance.
TEST(Conv2dGemm, ToleranceCatchesALostChunk) {
  Generator gen(testing::fresh_seed());
  const Case k{"3x3", 4, 8, 3, 3, 5, 3, 1, 1, 1, false, false};
  Tensor x = randn({k.n, k.c, k.h, k.w}, gen, DType::F32), dy = randn({k.n, k.o, 3, 3}, gen, DType::F32);
  Tensor full = empty({k.o, k.c, 3, 3}, DType::F32), lost = empty({k.o, k.c, 3, 3}, DType::F32);
  Conv2dGeometry g = geometry(k);
  cpu::conv_gemm_backward_weight(g, x.data<float>(), dy.data<float>(), full.data<float>());
  g.n = k.n - 1;
  cpu::conv_gemm_backward_weight(g, x.data<float>(), dy.data<float>(), lost.data<float>());
  EXPECT_GT(testing::max_rel_error(lost, full), 100 * 2e-5);
}

TEST(Conv2dOneDnn, ResultsDoNotDependOnThreadCount) {
  for (const Case& k : cases()) {
    SCOPED_TRACE(k.what);
    const Inputs in = random_inputs(k);
    auto [one, three] = at_one_and_three_threads([&] { return run(k, in.x, in.w, in.b, in.r, true); });
    for (size_t i = 0; i < one.size(); ++i) testing::expect_bitwise_equal(one[i], three[i], std::to_string(i));
  }
}

}  // namespace
}  // namespace tandem
