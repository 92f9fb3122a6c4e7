// conv2d and pooling on bf16 operands, on the CPU (oneDNN's native bf16 kernels where the processor has them, and f32
// on widened operands, both run) and on CUDA (cuDNN's bf16 configuration:
// the simulated cuDNN rounds as the hardware does), skipped there without a GPU: forward (the convolution rounded, then
// the bias added and rounded again), data and weight gradients and the bias gradient equal the f64 convolution of the
// same bf16 values rounded to bf16 at those points, within one bf16 step plus the f32 accumulation's error bound (2^-16
// of the sum of the terms' magnitudes: at most 256 terms, each f32 addition off by at most 2^-24 of the running
// magnitude), for plain, strided, grouped and channels-last convolutions. Pooling computes in f32 and rounds once: max
// pooling and its gradient exactly, average pooling within one step.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/base/config.h"
#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/precision.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using tandem::testing::bf16_rounded;
using tandem::testing::bf16_steps;
using tandem::testing::expect_bf16_near;
using tandem::testing::expect_bitwise_equal;
using tandem::testing::expect_close;
using tandem::testing::f32_accumulation_slack;
using tandem::testing::fresh_seed;
using tandem::testing::max_magnitude;
using tandem::testing::random_bf16;

struct ConvCase {
  const char* name;
  Shape x, w;
  Conv2dOptions o;
  bool channels_last;
};

// The f64 convolution without its bias (y), and the gradients of conv2d(x, w, b) for output gradient gy.
struct F64Result {
  Tensor y, gx, gw, gb;
};
F64Result conv_f64(const Tensor& x, const Tensor& w, const Tensor& b, const Tensor& gy, const Conv2dOptions& o) {
  Tensor xd = x.to(DType::F64).detach().set_requires_grad(), wd = w.to(DType::F64).detach().set_requires_grad();
  Tensor bd = b.to(DType::F64).detach().set_requires_grad();
  Tensor y = conv2d(xd, wd, Tensor(), o);
  add(y, bd.view({1, -1, 1, 1})).backward(gy.to(DType::F64));
  return {y.detach(), xd.grad(), wd.grad(), bd.grad()};
}

class Bf16NNOn : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam().is_cuda()) TD_REQUIRE_GPU();
  }
  // Runs `check` once on CUDA; on the CPU with oneDNN on (its native bf16 convolutions where cpu_native_bf16())
  // and off (f32 on widened copies), naming the path in failures.
  void on_each_cpu_path(const std::function<void()>& check) {
    if (GetParam().is_cuda()) return check();
    const bool was = cpu_onednn();
    for (bool onednn : {true, false}) {
      set_cpu_onednn(onednn);
      SCOPED_TRACE(cpu_native_bf16() ? "oneDNN's native bf16" : "f32 on widened copies");
      check();
    }
    set_cpu_onednn(was);
  }
};

TEST_P(Bf16NNOn, ForwardAndGradientsRoundOnceFromTheF64Convolution) {
  const Device dev = GetParam();
  Generator gen(fresh_seed());
  Conv2dOptions strided;
  strided.stride_h = strided.stride_w = 2;
  strided.pad_h = strided.pad_w = 1;
  Conv2dOptions grouped;
  grouped.pad_h = grouped.pad_w = 1;
  grouped.groups = 2;
  const std::vector<ConvCase> cases = {
      {"3x3", {2, 8, 7, 7}, {16, 8, 3, 3}, Conv2dOptions{}, false},
      {"3x3 stride 2 channels-last", {2, 8, 9, 9}, {16, 8, 3, 3}, strided, true},
      {"grouped", {2, 8, 6, 6}, {8, 4, 3, 3}, grouped, false},
      {"1x1 channels-last", {3, 16, 5, 5}, {8, 16, 1, 1}, Conv2dOptions{}, true},
      {"16 to 64 channels (split by output channels)", {2, 16, 6, 6}, {64, 16, 3, 3}, Conv2dOptions{}, false},
  };
  on_each_cpu_path([&] {
    for (const ConvCase& c : cases) {
      Tensor x = random_bf16(c.x, gen, dev), w = random_bf16(c.w, gen, dev), b = random_bf16({c.w[0]}, gen, dev);
      if (c.channels_last) x = to_channels_last(x);
      x.set_requires_grad(true);
      w.set_requires_grad(true);
      b.set_requires_grad(true);
      Tensor y = conv2d(x, w, b, c.o);
      ASSERT_EQ(y.dtype(), DType::BF16) << c.name;
      const Tensor gy = random_bf16(y.shape(), gen, dev);
      y.backward(gy);

      const F64Result want = conv_f64(x, w, b, gy, c.o);
      const F64Result mag = conv_f64(abs(x.detach()), abs(w.detach()), abs(b.detach()), abs(gy), c.o);
      const std::string name = c.name;
      // The forward rounds twice: the convolution's result, then that plus the bias (conv2d's rounding points).
      // A first rounding that f32 accumulation tips to the other side of a tie moves the sum by one step of the
      // convolution's result: that, and the accumulation bound, is the slack.
      const Tensor conv_rounded = bf16_rounded(want.y).to(DType::F64);
      const Tensor want_y = bf16_rounded(add(conv_rounded, b.detach().to(DType::F64).view({1, -1, 1, 1})));
      expect_bf16_near(y, want_y, 1, add(f32_accumulation_slack(mag.y), bf16_steps(want.y).to(dev)), name + " forward");
      expect_bf16_near(x.grad(), bf16_rounded(want.gx), 1, f32_accumulation_slack(mag.gx), name + " data gradient");
      expect_bf16_near(w.grad(), bf16_rounded(want.gw), 1, f32_accumulation_slack(mag.gw), name + " weight gradient");
      expect_bf16_near(b.grad(), bf16_rounded(want.gb), 1, f32_accumulation_slack(mag.gb), name + " bias gradient");
    }
  });
}

// One input channel and a 1x1 filter: each output is one product, exact in f32, so the stored value is the
// product rounded to nearest even, to the bit (a truncating store fails here, as do ties rounded away from zero).
TEST_P(Bf16NNOn, OneProductPerOutputIsRoundedToNearestEven) {
  const Device dev = GetParam();
  Generator gen(fresh_seed());
  const Tensor x = random_bf16({2, 1, 32, 32}, gen, dev), w = random_bf16({4, 1, 1, 1}, gen, dev);
  const Tensor want = conv2d(x.to(DType::F64), w.to(DType::F64), Tensor(), Conv2dOptions{});
  on_each_cpu_path([&] {
    const Tensor y = conv2d(x, w, Tensor(), Conv2dOptions{});
    expect_bf16_near(y, bf16_rounded(want), 0, Tensor(), "1x1 single channel");
  });
}

// Pooling of x (bf16, requiring grad) and of its f64 copy, backpropagating gy; outputs and input gradients, and
// (for the accumulation bound) the f64 gradient of |gy|.
struct PoolRun {
  Tensor y, gx, y64, gx64, gx64_magnitude;
};
PoolRun pool_both(const std::function<Tensor(const Tensor&)>& pool, const Tensor& x, Generator& gen) {
  Tensor xb = x.detach().set_requires_grad(), x64 = x.detach().to(DType::F64).set_requires_grad();
  Tensor xm = x.detach().to(DType::F64).set_requires_grad();
  Tensor y = pool(xb), y64 = pool(x64);
  const Tensor gy = random_bf16(y.shape(), gen, x.device());
  y.backward(gy);
  y64.backward(gy.to(DType::F64));
  pool(xm).backward(abs(gy.to(DType::F64)));
  return {y, xb.grad(), y64, x64.grad(), xm.grad()};
}

TEST_P(Bf16NNOn, PoolingRoundsOnceFromF32) {
  const Device dev = GetParam();
  Generator gen(fresh_seed());
  Pool2dOptions stem;  // ResNet's stem: 3x3, stride 2, padding 1 (overlapping windows)
  stem.kernel_h = stem.kernel_w = 3;
  stem.pad_h = stem.pad_w = 1;
  for (bool cl : {false, true}) {
    Tensor x = random_bf16({2, 8, 9, 9}, gen, dev);
    if (cl) x = to_channels_last(x);
    const std::string layout = cl ? " channels-last" : "";
    // Max: the output is an input value; each gradient a sum of at most 4 bf16 values, exact in f32.
    PoolRun r = pool_both([&](const Tensor& t) { return max_pool2d(t, stem); }, x, gen);
    expect_bf16_near(r.y, bf16_rounded(r.y64), 0, Tensor(), "max_pool2d" + layout);
    expect_bf16_near(r.gx, bf16_rounded(r.gx64), 0, Tensor(), "max_pool2d gradient" + layout);
    r = pool_both([&](const Tensor& t) { return avg_pool2d(t, stem); }, x, gen);
    expect_bf16_near(r.y, bf16_rounded(r.y64), 1, Tensor(), "avg_pool2d" + layout);
    expect_bf16_near(r.gx, bf16_rounded(r.gx64), 1, f32_accumulation_slack(r.gx64_magnitude),
                     "avg_pool2d gradient" + layout);
    r = pool_both([](const Tensor& t) { return global_avg_pool2d(t); }, x, gen);
    expect_bf16_near(r.y, bf16_rounded(r.y64), 1, Tensor(), "global_avg_pool2d" + layout);
    expect_bf16_near(r.gx, bf16_rounded(r.gx64), 1, f32_accumulation_slack(r.gx64_magnitude),
                     "global_avg_pool2d gradient" + layout);
  }
}

// Batch norm in training with the residual add and ReLU fused (ResNet's last batch norm of a block) and plain, on
// a bf16 input with f32 parameters: the output rounds the f64 result once (the ReLU mask is the stored bf16
// output's, as backward reads it), the input and residual gradients are bf16 and the parameter gradients and
// running statistics f32, all within f32 arithmetic's error of f64.
// batch_norm and batch_norm_act on bf16 activations (the native bf16 kernels) against f64 batch norm of the same
// values rounded once to bf16: NCHW and channels-last, training and evaluation, plain, with the residual and ReLU,
// and with the residual and ReLU6; the gradient masked where the bf16 output is clamped.
TEST_P(Bf16NNOn, BatchNormTakesBf16ActivationsWithF32Parameters) {
  const Device dev = GetParam();
  Generator gen(fresh_seed());
  const TensorOptions f32 = TensorOptions(DType::F32).with_device(dev);
  const Tensor zero64 = zeros({}, TensorOptions(DType::F64).with_device(dev));
  for (bool cl : {false, true})
    for (BnActivation act : {BnActivation::None, BnActivation::Relu, BnActivation::Relu6})
      for (bool training : {true, false}) {
        const bool fused = act != BnActivation::None;
        const std::string name = std::string(fused ? "batch_norm_act" : "batch_norm") +
                                 (act == BnActivation::Relu6 ? " relu6" : "") + (cl ? " nhwc" : " nchw") +
                                 (training ? " train" : " eval");
        auto activation = [&](double scale) {
          Tensor t = bf16_rounded(mul(random_bf16({4, 8, 4, 5}, gen, dev), scale)).to(DType::BF16).to(dev);
          return cl ? to_channels_last(t) : t;
        };
        Tensor x = activation(3.0).set_requires_grad(), r = activation(1.0).set_requires_grad();
        Tensor w = randn({8}, gen, f32).set_requires_grad(), b = randn({8}, gen, f32).set_requires_grad();
        Tensor rm = randn({8}, gen, f32), rv = add(rand({8}, gen, f32), 0.5);
        const Tensor rm0 = rm.clone(), rv0 = rv.clone();
        Tensor y = fused ? batch_norm_act(x, w, b, rm, rv, r, act, training, 0.1, 1e-5)
                         : batch_norm(x, w, b, rm, rv, training, 0.1, 1e-5);
        ASSERT_EQ(y.dtype(), DType::BF16) << name;
        EXPECT_EQ(is_channels_last(y), cl) << name;
        const Tensor gy = random_bf16(y.shape(), gen, dev);
        y.backward(gy);

        auto f64 = [](const Tensor& t) { return t.detach().to(DType::F64).set_requires_grad(); };
        Tensor x64 = f64(x), r64 = f64(r), w64 = f64(w), b64 = f64(b);
        Tensor rm64 = rm0.to(DType::F64), rv64 = rv0.to(DType::F64);
        Tensor pre = batch_norm(x64, w64, b64, rm64, rv64, training, 0.1, 1e-5);
        if (fused) pre = add(pre, r64);
        const Tensor want = act == BnActivation::Relu ? relu(pre) : act == BnActivation::Relu6 ? relu6(pre) : pre;
        expect_bf16_near(y, bf16_rounded(want), 1, f32_accumulation_slack(add(abs(pre), 8.0)), name + " forward");
        // The gradient passes where the bf16 output is inside the activation's open interval.
        const Tensor y64 = y.detach().to(DType::F64);
        Tensor g64 = gy.to(DType::F64);
        if (fused) g64 = where(gt(y64, zero64), g64, zero64);
        if (act == BnActivation::Relu6) g64 = where(lt(y64, add(zero64, 6.0)), g64, zero64);
        pre.backward(g64);
        const double gx_scale = max_magnitude(x64.grad());
        expect_bf16_near(x.grad(), bf16_rounded(x64.grad()), 1, mul(ones_like(x64.grad()), gx_scale * 1e-3),
                         name + " input gradient");
        EXPECT_EQ(is_channels_last(x.grad()), cl) << name;
        EXPECT_EQ(w.grad().dtype(), DType::F32);
        expect_close(w.grad(), w64.grad(), 1e-3, name + " weight gradient");
        expect_close(b.grad(), b64.grad(), 1e-3, name + " bias gradient");
        expect_close(rm, rm64, 1e-5, name + " running mean");
        expect_close(rv, rv64, 1e-5, name + " running variance");
        if (fused) expect_bf16_near(r.grad(), bf16_rounded(r64.grad()), 0, Tensor(), name + " residual gradient");
      }
}

// A small network: conv2d -> relu -> global average pool -> linear -> log_softmax -> loss against one class
// per image, with f32 leaves.
struct Net {
  Tensor conv_w, fc_w, fc_b;
  Tensor loss(const Tensor& x, const Tensor& pick) const {
    Conv2dOptions o;
    o.pad_h = o.pad_w = 1;
    const Tensor h = global_avg_pool2d(relu(conv2d(x, conv_w, Tensor(), o)));
    logits = linear(h, fc_w, fc_b);
    return neg(mean(mul(log_softmax(logits, 1), pick)));
  }
  mutable Tensor logits;
};

TEST_P(Bf16NNOn, PolicyCastsF32OperandsOfProductsAndKeepsMasterWeightsF32) {
  const Device dev = GetParam();
  Generator gen(fresh_seed());
  const TensorOptions f32 = TensorOptions(DType::F32).with_device(dev);
  Net net{randn({8, 3, 3, 3}, gen, f32), randn({5, 8}, gen, f32), randn({5}, gen, f32)};
  for (Tensor* t : {&net.conv_w, &net.fc_w, &net.fc_b}) t->set_requires_grad(true);
  const Tensor x = randn({4, 3, 6, 6}, gen, f32);
  Tensor pick = zeros({4, 5}, f32);
  for (int64_t i = 0; i < 4; ++i) pick.select(0, i).select(0, i % 5).fill_(1.0);

  // Under bf16: products in bf16, the loss in f32, the gradients of the f32 leaves in f32.
  Tensor loss;
  {
    PrecisionGuard bf16(Precision::BF16);
    loss = net.loss(x, pick);
  }
  EXPECT_EQ(net.logits.dtype(), DType::BF16);
  EXPECT_EQ(loss.dtype(), DType::F32);
  loss.backward();
  std::vector<Tensor> grads;
  for (Tensor* t : {&net.conv_w, &net.fc_w, &net.fc_b}) {
    EXPECT_EQ(t->grad().dtype(), DType::F32);
    grads.push_back(t->grad());
    t->set_grad(Tensor());
  }
  // The same network with the casts written out (the policy's rounding points, precision.h): bitwise equal.
  Net cast{net.conv_w.to(DType::BF16), net.fc_w.to(DType::BF16), net.fc_b.to(DType::BF16)};
  const Tensor written = cast.loss(x.to(DType::BF16), pick);
  expect_bitwise_equal(loss, written, "loss with the casts written out");
  written.backward();
  expect_bitwise_equal(grads[0], net.conv_w.grad(), "conv weight gradient");
  expect_bitwise_equal(grads[1], net.fc_w.grad(), "linear weight gradient");
  expect_bitwise_equal(grads[2], net.fc_b.grad(), "linear bias gradient");
  // And close to f32, the default policy, which leaves everything f32.
  const Tensor loss32 = net.loss(x, pick);
  EXPECT_EQ(net.logits.dtype(), DType::F32);
  expect_close(loss, loss32, 0.05, "bf16 loss against f32");
  // f64 is left alone by the policy.
  PrecisionGuard bf16(Precision::BF16);
  EXPECT_EQ(conv2d(x.to(DType::F64), net.conv_w.detach().to(DType::F64), Tensor(), Conv2dOptions{}).dtype(),
            DType::F64);
}

TEST(Precision, NamesParseAndUnknownOnesAreRefused) {
  EXPECT_EQ(parse_precision("bf16"), Precision::BF16);
  EXPECT_EQ(parse_precision(precision_name(Precision::F32)), Precision::F32);
  tandem::testing::expect_error<ValueError>([] { parse_precision("fp16"); }, {"unknown precision 'fp16'", "bf16"});
  EXPECT_EQ(current_precision(), Precision::F32);
  {
    PrecisionGuard outer(Precision::BF16);
    {
      PrecisionGuard inner(Precision::F32);
      EXPECT_EQ(current_precision(), Precision::F32);
    }
    EXPECT_EQ(current_precision(), Precision::BF16);
  }
  EXPECT_EQ(current_precision(), Precision::F32);
}

TEST_P(Bf16NNOn, MixedDtypesAreRefused) {
  const Device dev = GetParam();
  Generator gen(fresh_seed());
  const Tensor x = random_bf16({1, 4, 5, 5}, gen, dev);
  const Tensor w = random_bf16({4, 4, 3, 3}, gen, dev).to(DType::F32);
  EXPECT_THROW(conv2d(x, w, Tensor(), Conv2dOptions{}), DTypeError);
}

INSTANTIATE_TEST_SUITE_P(Devices, Bf16NNOn, ::testing::Values(Device::cpu(), Device::cuda()),
                         [](const ::testing::TestParamInfo<Device>& i) {
                           return std::string(i.param.is_cuda() ? "Cuda" : "Cpu");
                         });

}  // namespace
}  // namespace tandem
