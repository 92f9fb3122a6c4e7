// In-place gradient accumulation (autograd::InPlaceGrads): a ResNet basic block's and a MobileNetV2 inverted
// residual's backward, whose input gradient sums the shortcut's and the first convolution's, gives bitwise the
// gradients of the separate add (accumulation switched off) with one add kernel and its allocations fewer, on the
// CPU and on CUDA (the simulated GPU in CI); the fused batch norm adds its residual's gradient in place when that
// buffer is pending first; a gradient the engine does not own alone is never written.
#include <gtest/gtest.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/layers.h"
#include "models/zoo/mobilenet_v2.h"
#include "models/zoo/resnet.h"
#include "runtime/memory/memory.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/harness/call_counts.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

// Sets autograd::inplace_accumulation() while in scope.
class InPlaceGuard {
 public:
  explicit InPlaceGuard(bool on) : was_(autograd::inplace_accumulation()) { autograd::set_inplace_accumulation(on); }
  ~InPlaceGuard() { autograd::set_inplace_accumulation(was_); }
  InPlaceGuard(const InPlaceGuard&) = delete;
  InPlaceGuard& operator=(const InPlaceGuard&) = delete;

 private:
  bool was_;
};

std::vector<Device> devices() {
  std::vector<Device> d{Device::cpu()};
  if (cuda_available()) d.push_back(Device::cuda());
  return d;
}

// One backward: the input's and the parameters' gradients, and the binary kernel calls and allocations it made.
struct Backward {
  std::vector<Tensor> grads;
  int binary_calls = 0;
  int64_t allocations = 0;
};

Backward block_backward(Module& block, const Tensor& x, const Tensor& gy, bool in_place) {
  InPlaceGuard guard(in_place);
  block.zero_grad();
  Tensor xi = x.clone().set_requires_grad();
  Tensor y = block.forward(xi);
  Backward b;
  const int64_t allocations = memory_counters(x.device()).allocations;
  {
    tandem::testing::CallCounts calls(x.device().type);
    y.backward(gy);
    b.binary_calls = calls.of("binary");
  }
  b.allocations = memory_counters(x.device()).allocations - allocations;
  b.grads.push_back(xi.grad());
  for (const auto& p : block.named_parameters()) b.grads.push_back(p.second.grad());
  return b;
}

// The block's backward in f32 (NCHW and channels-last) with and without in-place accumulation: bitwise equal
// gradients, `sums` binary kernels fewer (the shortcut's adds) and fewer allocations.
void expect_in_place_equal(const std::function<ModulePtr(Generator&)>& make, const Shape& input, int sums) {
  tandem::testing::NumericsGuard exact(false, true);
  for (Device d : devices()) {
    for (bool channels_last : {false, true}) {
      SCOPED_TRACE(d.str() + (channels_last ? " channels-last" : " NCHW"));
      Generator gen(tandem::testing::fresh_seed());
      ModulePtr block = make(gen);
      block->to(d);
      block->train();
      Tensor x = randn(input, gen).to(d), gy = randn(block->output_shape(input), gen).to(d);
      if (channels_last) x = to_channels_last(x), gy = to_channels_last(gy);
      const Backward off = block_backward(*block, x, gy, false), on = block_backward(*block, x, gy, true);
      ASSERT_EQ(on.grads.size(), off.grads.size());
      for (size_t i = 0; i < off.grads.size(); ++i)
        tandem::testing::expect_bitwise_equal(on.grads[i], off.grads[i], "gradient " + std::to_string(i));
      EXPECT_EQ(off.binary_calls - on.binary_calls, sums);
      EXPECT_LT(on.allocations, off.allocations);
    }
  }
}

TEST(InPlaceGrad, BasicBlockWithIdentityShortcut) {
  expect_in_place_equal([](Generator& gen) { return std::make_shared<BasicBlock>(8, 8, 1, false, gen); }, {2, 8, 6, 6},
                        1);
}

TEST(InPlaceGrad, BasicBlockWithDownsample) {
  expect_in_place_equal([](Generator& gen) { return std::make_shared<BasicBlock>(4, 8, 2, false, gen); }, {2, 4, 6, 6},
                        1);
}

TEST(InPlaceGrad, InvertedResidual) {
  expect_in_place_equal([](Generator& gen) { return std::make_shared<InvertedResidual>(8, 8, 1, 2, 3, true, gen); },
                        {2, 8, 6, 6}, 1);
}

// x feeds a convolution, then the fused batch norm as its residual, then a scaling made last: backward runs the
// scaling first, so the batch norm finds x's gradient pending and adds its residual's into it in place
// (accumulate_dresidual), and the convolution after it too: no add at all, the separate add's values bitwise.
TEST(InPlaceGrad, FusedBatchNormAddsItsResidualGradientInPlace) {
  tandem::testing::NumericsGuard exact(false, true);
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    Generator gen(tandem::testing::fresh_seed());
    const Tensor x0 = randn({2, 4, 5, 5}, gen).to(d), w = randn({4, 4, 3, 3}, gen).to(d);
    const Tensor gz = randn({2, 4, 5, 5}, gen).to(d), gs = randn({2, 4, 5, 5}, gen).to(d);
    auto run = [&](bool in_place, int* binary_calls) {
      InPlaceGuard guard(in_place);
      Tensor leaf = x0.clone().set_requires_grad(), wl = w.clone().set_requires_grad();
      Tensor x = exp(leaf);
      Conv2dOptions o;
      o.pad_h = o.pad_w = 1;
      Tensor c = conv2d(x, wl, Tensor(), o);
      Tensor z = batch_norm_act(c, Tensor(), Tensor(), Tensor(), Tensor(), x, BnActivation::Relu, true, 0.1, 1e-5);
      Tensor s = mul(x, 3.0);
      tandem::testing::CallCounts calls(d.type);
      autograd::backward({z, s}, {gz, gs});
      *binary_calls = calls.of("binary");
      return std::vector<Tensor>{leaf.grad(), wl.grad()};
    };
    int off_calls = 0, on_calls = 0;
    const std::vector<Tensor> off = run(false, &off_calls), on = run(true, &on_calls);
    tandem::testing::expect_bitwise_equal(on[0], off[0], "input gradient");
    tandem::testing::expect_bitwise_equal(on[1], off[1], "weight gradient");
    EXPECT_EQ(off_calls - on_calls, 2);  // both sums into x's gradient
  }
}

// The input gradient of a 1x1 convolution without bias from its output's gc: gc's channels mixed by w.
Tensor pointwise_input_grad(const Tensor& gc, const Tensor& w) {
  const Shape& s = gc.shape();
  const Tensor rows = gc.permute({0, 2, 3, 1}).reshape({s[0] * s[2] * s[3], s[1]});
  const Tensor mixed = matmul(rows, w.reshape({w.shape()[0], w.shape()[1]}));
  return mixed.reshape({s[0], s[2], s[3], w.shape()[1]}).permute({0, 3, 1, 2});
}

// Gradients the engine does not own alone are read, never written: a gradient passed to backward() (pending for
// x, to which the convolution's data gradient is then added) and one a backward returns but also keeps.
TEST(InPlaceGrad, BuffersTheEngineDoesNotOwnAreNotWritten) {
  tandem::testing::NumericsGuard exact(false, true);  // no TF32 in the convolution nor in the reference's matmul
  for (Device d : devices()) {
    SCOPED_TRACE(d.str());
    Generator gen(tandem::testing::fresh_seed());
    const Tensor x0 = randn({2, 3, 4, 4}, gen).to(d), w = randn({3, 3, 1, 1}, gen).to(d);
    const Tensor gx = randn({2, 3, 4, 4}, gen).to(d), gc = randn({2, 3, 4, 4}, gen).to(d);
    const Tensor gx_before = gx.clone();
    Tensor kept = randn({2, 3, 4, 4}, gen).to(d);
    const Tensor kept_before = kept.clone();
    // The user's gradient for x, a root beside the convolution of x.
    Tensor leaf = x0.clone().set_requires_grad();
    Tensor x = exp(leaf);
    Tensor c = conv2d(x, w, Tensor(), Conv2dOptions());
    autograd::backward({c, x}, {gc, gx});
    tandem::testing::expect_bitwise_equal(gx, gx_before, "the gradient passed to backward");
    const Tensor want = mul(add(gx, pointwise_input_grad(gc, w)), exp(x0));
    tandem::testing::expect_close(leaf.grad(), want, 1e-5, "input gradient");
    // A backward returning a tensor it also keeps (made last, so its gradient is the one pending for x).
    Tensor leaf2 = x0.clone().set_requires_grad();
    Tensor x2 = exp(leaf2);
    Tensor c2 = conv2d(x2, w, Tensor(), Conv2dOptions());
    Tensor k;
    {
      autograd::NoGradGuard ng;
      k = x2.clone();
    }
    autograd::record("keeps", {x2}, {k},
                     [kept](std::vector<Tensor>&, const std::vector<bool>&) { return std::vector<Tensor>{kept}; });
    autograd::backward({c2, k}, {gc, gx});
    tandem::testing::expect_bitwise_equal(kept, kept_before, "the kept gradient");
    tandem::testing::expect_close(leaf2.grad(), mul(add(kept, pointwise_input_grad(gc, w)), exp(x0)), 1e-5,
                                  "input gradient with the kept one");
  }
}

}  // namespace
}  // namespace models
}  // namespace tandem
