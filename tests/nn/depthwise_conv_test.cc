// The CUDA backend's own depthwise passes (kernels/cuda/nn/depthwise.cu): on fresh random geometries (strides 1 to 3,
// padding, dilation, taps up to 3 x 3) the output (with a bias in f32 and f64), the input and the weight gradients
// equal the CPU backend's, and the simulated cuDNN's that they replace, in f64, f32 and bf16; a data gradient added
// in place is the separate add's sum bitwise; runs are bitwise equal; and the passes they do not take (NCHW, a
// channel multiplier, 5 x 5) still go to cuDNN (seen in the simulated GPU's record of what ran).
#include <gtest/gtest.h>

#include <random>
#include <string>
#include <vector>

#include "kernels/cuda/nn/depthwise.h"
#include "runtime/base/config.h"
#include "runtime/memory/stream.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "tests/harness/kernel_record.h"
#include "tests/testing.h"

namespace tandem {
namespace {

struct Shape2 {
  int64_t n, c, h, w, kh, kw, stride, pad, dilation;
};

// A fresh depthwise geometry: small images, a 1x1 to 3x3 kernel, stride 1 to 3 (the kernels count strides 1 and 2
// and divide by others), padding 0 to 2, dilation 1 or 2.
Shape2 fresh_shape(std::mt19937_64& g) {
  auto pick = [&](int64_t lo, int64_t hi) { return std::uniform_int_distribution<int64_t>(lo, hi)(g); };
  Shape2 s{pick(1, 3), pick(1, 40), pick(5, 12), pick(5, 12), pick(1, 3),
           pick(1, 3), pick(1, 3),  pick(0, 2),  pick(1, 2)};
  return s;
}

Conv2dOptions options_of(const Shape2& s) {
  Conv2dOptions o;
  o.stride_h = o.stride_w = s.stride;
  o.pad_h = o.pad_w = s.pad;
  o.dilation_h = o.dilation_w = s.dilation;
  o.groups = s.c;
  return o;
}

struct Grads {
  Tensor y, dx, dw;
};

// conv2d's output (with `bias`, which may be undefined) and gradients on `device` (channels-last input and weight on
// CUDA), back on the CPU.
Grads grads_on(Device device, const Tensor& x, const Tensor& w, const Tensor& bias, const Tensor& dy,
               const Conv2dOptions& o) {
  Tensor xd = x.to(device), wd = w.to(device);
  if (device.is_cuda()) xd = to_channels_last(xd), wd = to_channels_last(wd);
  xd = xd.detach().set_requires_grad(true);
  wd = wd.detach().set_requires_grad(true);
  Tensor y = conv2d(xd, wd, bias.defined() ? bias.to(device) : Tensor(), o);
  y.backward(dy.to(device));
  return {y.detach().to(Device::cpu()).contiguous(), xd.grad().to(Device::cpu()).contiguous(),
          wd.grad().to(Device::cpu()).contiguous()};
}

bool any_contains(const std::vector<std::string>& names, const std::string& part) {
  return testing::count_containing(names, part) > 0;
}

class DepthwiseSwitch {
 public:
  explicit DepthwiseSwitch(bool on) : was_(depthwise_kernels()) { set_depthwise_kernels(on); }
  ~DepthwiseSwitch() { set_depthwise_kernels(was_); }

 private:
  bool was_;
};

TEST(DepthwiseConv, PassesEqualTheCpuAndCudnnOnFreshGeometries) {
  TD_REQUIRE_GPU();
  testing::NumericsGuard numerics(false, true);  // no TF32: cuDNN's f32 is plain f32 too
  std::mt19937_64 rng(testing::fresh_seed());
  Generator gen(testing::fresh_seed());
  for (int round = 0; round < 6; ++round)
    for (DType t : {DType::F64, DType::F32, DType::BF16}) {
      const Shape2 s = fresh_shape(rng);
      const Conv2dOptions o = options_of(s);
      const int64_t oh = (s.h + 2 * s.pad - s.dilation * (s.kh - 1) - 1) / s.stride + 1;
      const int64_t ow = (s.w + 2 * s.pad - s.dilation * (s.kw - 1) - 1) / s.stride + 1;
      if (oh < 1 || ow < 1) continue;
      const std::string what = std::string(dtype_name(t)) + " n" + std::to_string(s.n) + " c" + std::to_string(s.c) +
                               " " + std::to_string(s.h) + "x" + std::to_string(s.w) + " k" + std::to_string(s.kh) +
                               "x" + std::to_string(s.kw) + " s" + std::to_string(s.stride) + " p" +
                               std::to_string(s.pad) + " d" + std::to_string(s.dilation);
      const DType drawn = t == DType::BF16 ? DType::F32 : t;  // randn draws f32 or f64, then rounded to bf16
      const Tensor x = randn({s.n, s.c, s.h, s.w}, gen, drawn).to(t), w = randn({s.c, 1, s.kh, s.kw}, gen, drawn).to(t);
      const Tensor dy = randn({s.n, s.c, oh, ow}, gen, drawn).to(t);
      // conv2d adds a bf16 convolution's bias after the rounding, outside the kernels: f32 and f64 take one.
      const Tensor bias = t == DType::BF16 ? Tensor() : randn({s.c}, gen, drawn);
      const Grads cpu = grads_on(Device::cpu(), x, w, bias, dy, o);
      Grads mine, again, cudnn;
      {
        DepthwiseSwitch on(true);
        const std::vector<std::string> names =
            testing::kernels_run([&] { mine = grads_on(Device::cuda(0), x, w, bias, dy, o); });
        again = grads_on(Device::cuda(0), x, w, bias, dy, o);
        if (!names.empty()) {
          EXPECT_TRUE(any_contains(names, "forward_kernel")) << what;
          EXPECT_TRUE(any_contains(names, "backward_data_kernel")) << what;
          EXPECT_TRUE(any_contains(names, "backward_weight_finalize_kernel")) << what;
          EXPECT_FALSE(any_contains(names, "cudnnConvolution")) << what;
        }
      }
      {
        DepthwiseSwitch off(false);
        const std::vector<std::string> names =
            testing::kernels_run([&] { cudnn = grads_on(Device::cuda(0), x, w, bias, dy, o); });
        if (!names.empty()) {
          EXPECT_TRUE(any_contains(names, "cudnnConvolutionForward")) << what;
          EXPECT_TRUE(any_contains(names, "cudnnConvolutionBackwardData")) << what;
          EXPECT_FALSE(any_contains(names, "forward_kernel")) << what;
          EXPECT_FALSE(any_contains(names, "backward_data_kernel")) << what;
        }
      }
      // bf16: both sides accumulate wider and round each result once, in other orders (cuDNN and the CPU in f32).
      const double tol = t == DType::F64 ? 1e-12 : t == DType::F32 ? 1e-5 : 1e-2;
      testing::expect_close(mine.y, cpu.y, tol, what + ": y against the CPU");
      testing::expect_close(mine.y, cudnn.y, tol, what + ": y against cuDNN");
      testing::expect_bitwise_equal(again.y, mine.y, what + ": y run twice");
      testing::expect_close(mine.dx, cpu.dx, tol, what + ": dx against the CPU");
      testing::expect_close(mine.dw, cpu.dw, tol, what + ": dw against the CPU");
      testing::expect_close(mine.dx, cudnn.dx, tol, what + ": dx against cuDNN");
      testing::expect_close(mine.dw, cudnn.dw, tol, what + ": dw against cuDNN");
      testing::expect_bitwise_equal(again.dx, mine.dx, what + ": dx run twice");
      testing::expect_bitwise_equal(again.dw, mine.dw, what + ": dw run twice");
    }
}

// More column strips than a grid holds down y (65535) and than the weight gradient has slices: each block then walks
// several strips, in the order the sums depend on.
TEST(DepthwiseConv, BlocksWalkSeveralStripsOfManyImages) {
  TD_REQUIRE_GPU();
  // Its three launches of 65537+ blocks of 256 threads took over 25 minutes under ThreadSanitizer.
  if (testing::sanitizer_run()) GTEST_SKIP() << "left to the plain simulated-GPU run (seconds there)";
  DepthwiseSwitch on(true);
  Generator gen(testing::fresh_seed());
  const int64_t n = 65536 + 1 + gen.integer(600), c = 1 + gen.integer(3);
  Conv2dOptions o;
  o.pad_h = o.pad_w = 1;
  o.groups = c;
  const Tensor x = randn({n, c, 2, 3}, gen, DType::F64), w = randn({c, 1, 3, 3}, gen, DType::F64);
  const Tensor dy = randn({n, c, 2, 3}, gen, DType::F64);
  const Grads cpu = grads_on(Device::cpu(), x, w, Tensor(), dy, o);
  const Grads mine = grads_on(Device::cuda(0), x, w, Tensor(), dy, o);
  testing::expect_close(mine.y, cpu.y, 1e-12, "y");
  testing::expect_close(mine.dx, cpu.dx, 1e-12, "dx");
  testing::expect_close(mine.dw, cpu.dw, 1e-12, "dw");
}

// conv2d_backward_data with accumulate: the gradient rounded to the dtype, then added to dx in one rounding.
TEST(DepthwiseConv, DataGradientAddedInPlaceIsTheSeparateAdd) {
  TD_REQUIRE_GPU();
  DepthwiseSwitch on(true);
  Generator gen(testing::fresh_seed());
  const Device gpu = Device::cuda(0);
  Conv2dGeometry g;
  g.dtype = DType::F32;
  g.channels_last = true;
  g.n = 2, g.c = 24, g.h = 9, g.w = 7, g.o = 24, g.kh = 3, g.kw = 3, g.groups = 24;
  g.pad_h = g.pad_w = 1;
  g.oh = 9, g.ow = 7;
  ASSERT_TRUE(cuda::depthwise_kernels_take(g)) << "the kernels take a 3x3 f32 channels-last depthwise pass";
  const Tensor dy = randn({g.n * g.oh * g.ow * g.c}, gen, DType::F32).to(gpu);
  const Tensor w = randn({g.c * g.kh * g.kw}, gen, DType::F32).to(gpu);
  const Tensor old = randn({g.n * g.h * g.w * g.c}, gen, DType::F32).to(gpu);
  Tensor fresh = empty({old.numel()}, TensorOptions(DType::F32).with_device(gpu)), summed = old.clone();
  NNBackend& nn = nn_backend_for(gpu);
  nn.conv2d_backward_data({g, dy.raw_data(), w.raw_data(), fresh.raw_data(), false}, current_stream(gpu));
  nn.conv2d_backward_data({g, dy.raw_data(), w.raw_data(), summed.raw_data(), true}, current_stream(gpu));
  testing::expect_bitwise_equal(summed.to(Device::cpu()), add(old, fresh).to(Device::cpu()), "dx += gradient");
}

// What the kernels leave to cuDNN: NCHW, a channel multiplier of 2, more than 9 taps, grouped convolutions.
TEST(DepthwiseConv, OtherPassesStayOnCudnn) {
  TD_REQUIRE_GPU();
  DepthwiseSwitch on(true);
  Conv2dGeometry g;
  g.dtype = DType::F32;
  g.channels_last = true;
  g.n = 2, g.c = 8, g.h = 6, g.w = 6, g.o = 8, g.kh = 3, g.kw = 3, g.groups = 8, g.oh = 4, g.ow = 4;
  EXPECT_TRUE(cuda::depthwise_kernels_take(g));
  Conv2dGeometry other = g;
  other.channels_last = false;
  EXPECT_FALSE(cuda::depthwise_kernels_take(other)) << "NCHW";
  other = g;
  other.dtype = DType::BF16;
  EXPECT_TRUE(cuda::depthwise_kernels_take(other)) << "bf16";
  other = g;
  other.o = 16;
  EXPECT_FALSE(cuda::depthwise_kernels_take(other)) << "two outputs per channel";
  other = g;
  other.kh = other.kw = 5;
  EXPECT_FALSE(cuda::depthwise_kernels_take(other)) << "25 taps";
  other = g;
  other.groups = 4;
  EXPECT_FALSE(cuda::depthwise_kernels_take(other)) << "grouped, not depthwise";
  DepthwiseSwitch off(false);
  EXPECT_FALSE(cuda::depthwise_kernels_take(g)) << "switched off";
}

}  // namespace
}  // namespace tandem
