// CUDA against the CPU for every NN layer (skipped without a GPU): conv2d, batch_norm, pooling, dropout and
// the optimizer steps, forward and backward, NCHW and channels-last, with TF32 off; bitwise-equal repeats
// in deterministic mode; mixed-device errors.
#include <gtest/gtest.h>

#include <functional>

#include "runtime/base/config.h"
#include "runtime/base/error.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

Device gpu() { return Device::cuda(0); }

using Fn = std::function<Tensor(const std::vector<Tensor>&)>;

struct Result {
  Tensor y;
  std::vector<Tensor> grads;  // of the inputs, on the CPU (undefined where none)
};

// Runs f on copies of `inputs` on `device` (the first in channels-last order when asked), all requiring
// grad, then backpropagates a random gradient drawn from `seed`. Results come back to the CPU.
Result run(const Fn& f, const std::vector<Tensor>& inputs, uint64_t seed, Device device, bool cl) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) {
      in.push_back(Tensor());
      continue;
    }
    Tensor t = inputs[i].to(device).clone();
    if (i == 0 && cl) t = to_channels_last(t);
    in.push_back(t.set_requires_grad());
  }
  Tensor y = f(in);
  if (cl && y.dim() == 4) {
    EXPECT_TRUE(is_channels_last(y)) << "output format on " << device;
  }
  Generator gen(seed);
  y.backward(randn(y.shape(), gen, y.dtype()).to(device));
  Result r{y.to(Device::cpu()), {}};
  for (const Tensor& t : in) r.grads.push_back(t.defined() ? t.grad().to(Device::cpu()) : Tensor());
  return r;
}

// Runs f on the CPU and on the GPU with the same inputs and compares outputs and gradients.
void expect_parity(const Fn& f, const std::vector<Tensor>& inputs, bool cl, double tol, const std::string& what,
                   bool bitwise = false) {
  const uint64_t seed = testing::fresh_seed();
  Result c = run(f, inputs, seed, Device::cpu(), cl), g = run(f, inputs, seed, gpu(), cl);
  if (bitwise)
    testing::expect_bitwise_equal(g.y, c.y, what + " output");
  else
    testing::expect_close(g.y, c.y, tol, what + " output");
  for (size_t i = 0; i < inputs.size(); ++i) {
    if (!inputs[i].defined()) continue;
    std::string name = what + " gradient of input " + std::to_string(i);
    if (bitwise)
      testing::expect_bitwise_equal(g.grads[i], c.grads[i], name);
    else
      testing::expect_close(g.grads[i], c.grads[i], tol, name);
  }
}

// Two GPU runs give bitwise-equal outputs and gradients.
void expect_repeatable(const Fn& f, const std::vector<Tensor>& inputs, bool cl, const std::string& what) {
  const uint64_t seed = testing::fresh_seed();
  Result a = run(f, inputs, seed, gpu(), cl), b = run(f, inputs, seed, gpu(), cl);
  testing::expect_bitwise_equal(a.y, b.y, what + " output");
  for (size_t i = 0; i < inputs.size(); ++i)
    if (inputs[i].defined()) testing::expect_bitwise_equal(a.grads[i], b.grads[i], what + " gradient");
}

Conv2dOptions conv_options(int64_t stride, int64_t pad, int64_t dilation, int64_t groups) {
  Conv2dOptions o;
  o.stride_h = o.stride_w = stride;
  o.pad_h = o.pad_w = pad;
  o.dilation_h = o.dilation_w = dilation;
  o.groups = groups;
  return o;
}

struct ConvCase {
  Shape x, w;
  Conv2dOptions o;
  bool bias;
};
std::vector<ConvCase> conv_cases() {
  return {
      {{4, 8, 12, 10}, {16, 8, 3, 3}, conv_options(1, 1, 1, 1), true},
      {{3, 6, 11, 11}, {8, 6, 3, 3}, conv_options(2, 0, 1, 1), false},
      {{2, 4, 10, 10}, {6, 4, 3, 3}, conv_options(1, 2, 2, 1), true},
      {{2, 8, 9, 9}, {8, 4, 3, 3}, conv_options(1, 1, 1, 2), true},
      {{3, 16, 14, 14}, {16, 1, 3, 3}, conv_options(2, 1, 1, 16), true},
      {{3, 8, 7, 7}, {16, 8, 1, 1}, conv_options(1, 0, 1, 1), false},
  };
}

TEST(CudaParity, Conv2d) {
  TD_REQUIRE_GPU();
  testing::NumericsGuard sw(false, false);
  for (DType dtype : {DType::F32, DType::F64})
    for (bool cl : {false, true})
      for (const ConvCase& k : conv_cases()) {
        Generator gen(testing::fresh_seed());
        std::vector<Tensor> in = {randn(k.x, gen, dtype), randn(k.w, gen, dtype),
                                  k.bias ? randn({k.w[0]}, gen, dtype) : Tensor()};
        Conv2dOptions o = k.o;
        expect_parity([o](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], o); }, in, cl,
                      dtype == DType::F32 ? 1e-4 : 1e-10, "conv2d " + shape_str(k.x) + " * " + shape_str(k.w));
      }
}

TEST(CudaParity, Conv2dWithTf32StaysClose) {
  TD_REQUIRE_GPU();
  testing::NumericsGuard sw(true, false);
  Generator gen(testing::fresh_seed());
  std::vector<Tensor> in = {randn({8, 32, 16, 16}, gen, DType::F32), randn({32, 32, 3, 3}, gen, DType::F32), Tensor()};
  Conv2dOptions o = conv_options(1, 1, 1, 1);
  expect_parity([o](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], o); }, in, false, 5e-2,
                "conv2d tf32");
}

TEST(CudaParity, Conv2dIsRepeatableInDeterministicMode) {
  TD_REQUIRE_GPU();
  testing::NumericsGuard sw(false, true);
  for (bool cl : {false, true}) {
    Generator gen(testing::fresh_seed());
    std::vector<Tensor> in = {randn({16, 32, 20, 20}, gen, DType::F32), randn({32, 32, 3, 3}, gen, DType::F32),
                              randn({32}, gen, DType::F32)};
    Conv2dOptions o = conv_options(1, 1, 1, 1);
    expect_repeatable([o](const std::vector<Tensor>& t) { return conv2d(t[0], t[1], t[2], o); }, in, cl,
                      "deterministic conv2d");
  }
}

// cuDNN's legacy descriptors hold sizes and strides in int: a tensor of 2^31 elements, each dimension small, is
// refused as a shape error with the reason, before anything is queued (the null pointers are never read).
TEST(CudaParity, Conv2dBeyondCudnnIntLimitIsAShapeError) {
  TD_REQUIRE_GPU();
  NNBackend& backend = nn_backend_for(gpu());
  const Stream s = current_stream(gpu());
  Conv2dGeometry big_input;  // x [2048, 1024, 32, 32]: 2^31 elements
  big_input.n = 2048;
  big_input.c = 1024;
  big_input.h = big_input.w = big_input.oh = big_input.ow = 32;
  big_input.o = 8;
  big_input.kh = big_input.kw = 1;
  Conv2dGeometry big_output = big_input;  // y [2048, 1024, 32, 32] from x [2048, 8, 32, 32]
  big_output.c = 8;
  big_output.o = 1024;
  for (const Conv2dGeometry& g : {big_input, big_output}) {
    const std::vector<std::function<void()>> passes = {
        [&] {
          backend.conv2d_forward({g, nullptr, nullptr, nullptr, nullptr}, s);
        },
        [&] {
          backend.conv2d_backward_data({g, nullptr, nullptr, nullptr}, s);
        },
        [&] {
          backend.conv2d_backward_weight({g, nullptr, nullptr, nullptr}, s);
        }};
    for (const auto& pass : passes) {
      try {
        pass();
        ADD_FAILURE() << "a conv2d with " << g.c << " input and " << g.o << " output channels was accepted";
      } catch (const ShapeError& e) {
        EXPECT_NE(std::string(e.what()).find("2^31"), std::string::npos) << e.what();
      } catch (const std::exception& e) {
        ADD_FAILURE() << "not a ShapeError: " << e.what();
      }
    }
  }
}

TEST(CudaParity, BatchNorm) {
  TD_REQUIRE_GPU();
  testing::NumericsGuard sw(false, true);
  for (DType dtype : {DType::F32, DType::F64})
    for (Shape s : {Shape{8, 6, 7, 5}, Shape{64, 3}})
      for (bool cl : {false, true})
        for (bool training : {true, false})
          for (bool affine : {true, false}) {
            if (cl && s.size() != 4) continue;
            Generator gen(testing::fresh_seed());
            const int64_t c = s[1];
            std::vector<Tensor> in = {add(randn(s, gen, dtype), 3.0), affine ? randn({c}, gen, dtype) : Tensor(),
                                      affine ? randn({c}, gen, dtype) : Tensor()};
            Tensor rm = randn({c}, gen, dtype), rv = add(rand({c}, gen, TensorOptions(dtype)), 0.5);
            Tensor rm_gpu = rm.to(gpu()).clone(), rv_gpu = rv.to(gpu()).clone();
            Tensor rm_cpu = rm.clone(), rv_cpu = rv.clone();
            Fn f = [&](const std::vector<Tensor>& t) {
              bool on_gpu = t[0].device().is_cuda();
              return batch_norm(t[0], t[1], t[2], on_gpu ? rm_gpu : rm_cpu, on_gpu ? rv_gpu : rv_cpu, training, 0.1,
                                1e-5);
            };
            std::string what = "batch_norm " + shape_str(s) + (training ? " training" : " eval");
            double tol = dtype == DType::F32 ? 1e-5 : 1e-11;
            expect_parity(f, in, cl, tol, what);
            testing::expect_close(rm_gpu, rm_cpu, tol, what + " running_mean");
            testing::expect_close(rv_gpu, rv_cpu, tol, what + " running_var");
            expect_repeatable(f, in, cl, what);
          }
}

TEST(CudaParity, Pooling) {
  TD_REQUIRE_GPU();
  for (DType dtype : {DType::F32, DType::F64})
    for (bool cl : {false, true})
      for (bool ceil : {false, true})
        for (bool include : {true, false}) {
          Pool2dOptions o;
          o.kernel_h = 3;
          o.kernel_w = 2;
          o.stride_h = 2;
          o.stride_w = 1;
          o.pad_h = 1;
          o.pad_w = 1;
          o.ceil_mode = ceil;
          o.count_include_pad = include;
          Generator gen(testing::fresh_seed());
          std::vector<Tensor> in = {randn({3, 5, 10, 9}, gen, dtype)};
          // The GPU's gathers add the same terms in the same order as the CPU's scatters: bitwise equal.
          expect_parity([o](const std::vector<Tensor>& t) { return max_pool2d(t[0], o); }, in, cl, 0, "max_pool2d",
                        true);
          expect_parity([o](const std::vector<Tensor>& t) { return avg_pool2d(t[0], o); }, in, cl, 0, "avg_pool2d",
                        true);
        }
  Generator gen(testing::fresh_seed());
  for (bool cl : {false, true})
    expect_parity([](const std::vector<Tensor>& t) { return global_avg_pool2d(t[0]); },
                  {randn({4, 6, 7, 7}, gen, DType::F32)}, cl, 0, "global_avg_pool2d", true);
}

TEST(CudaParity, DropoutMasksAreBitIdentical) {
  TD_REQUIRE_GPU();
  for (DType dtype : {DType::F32, DType::F64})
    for (bool cl : {false, true}) {
      Generator data(testing::fresh_seed());
      const uint64_t seed = testing::fresh_seed();
      expect_parity(
          [seed](const std::vector<Tensor>& t) {
            Generator gen(seed, 3);
            return dropout(t[0], 0.35, true, gen);
          },
          {randn({4, 5, 6, 7}, data, dtype)}, cl, 0, "dropout", true);
    }
}

TEST(CudaParity, OptimizerSteps) {
  TD_REQUIRE_GPU();
  for (DType dtype : {DType::F32, DType::F64}) {
    // More tensors than one launch carries, some spanning several blocks.
    Generator gen(testing::fresh_seed());
    std::vector<Tensor> p, g;
    for (int i = 0; i < 200; ++i) {
      int64_t n = i % 50 == 0 ? 20000 : 1 + static_cast<int64_t>(gen.integer(3000));
      p.push_back(randn({n}, gen, dtype));
      g.push_back(randn({n}, gen, dtype));
    }
    auto to_gpu = [](const std::vector<Tensor>& ts) {
      std::vector<Tensor> out;
      for (const Tensor& t : ts) out.push_back(t.to(gpu()).clone());
      return out;
    };
    auto zeros_like_all = [](const std::vector<Tensor>& ts) {
      std::vector<Tensor> out;
      for (const Tensor& t : ts) out.push_back(zeros_like(t));
      return out;
    };
    const double tol = dtype == DType::F32 ? 1e-5 : 1e-12;
    {
      std::vector<Tensor> pc = p, pg = to_gpu(p), gg = to_gpu(g);
      for (Tensor& t : pc) t = t.clone();
      std::vector<Tensor> bc = zeros_like_all(pc), bg = zeros_like_all(pg);
      SgdHyper h;
      h.lr = 0.05;
      h.momentum = 0.9;
      h.weight_decay = 0.01;
      h.nesterov = true;
      for (int step = 1; step <= 3; ++step) {
        h.first_step = step == 1;
        sgd_step_(pc, g, bc, h);
        sgd_step_(pg, gg, bg, h);
      }
      for (size_t i = 0; i < p.size(); ++i) testing::expect_close(pg[i], pc[i], tol, "sgd parameter");
    }
    for (bool decoupled : {false, true}) {
      std::vector<Tensor> pc = p, pg = to_gpu(p), gg = to_gpu(g);
      for (Tensor& t : pc) t = t.clone();
      std::vector<Tensor> mc = zeros_like_all(pc), vc = zeros_like_all(pc), mg = zeros_like_all(pg),
                          vg = zeros_like_all(pg);
      AdamHyper h;
      h.lr = 1e-2;
      h.weight_decay = 0.05;
      h.decoupled_weight_decay = decoupled;
      for (int step = 1; step <= 3; ++step) {
        h.step = step;
        adam_step_(pc, g, mc, vc, h);
        adam_step_(pg, gg, mg, vg, h);
      }
      for (size_t i = 0; i < p.size(); ++i) {
        testing::expect_close(pg[i], pc[i], tol, "adam parameter");
        testing::expect_close(vg[i], vc[i], tol, "adam exp_avg_sq");
      }
    }
  }
}

TEST(CudaParity, MixedDevicesAreRejected) {
  TD_REQUIRE_GPU();
  Generator gen(testing::fresh_seed());
  Tensor x = randn({2, 3, 8, 8}, gen, DType::F32), w = randn({4, 3, 3, 3}, gen, DType::F32);
  EXPECT_THROW(conv2d(x, w.to(gpu()), Tensor(), Conv2dOptions()), DeviceError);
  Tensor c = ones({3});
  EXPECT_THROW(batch_norm(x.to(gpu()), c, c, Tensor(), Tensor(), true, 0.1, 1e-5), DeviceError);
  EXPECT_THROW(sgd_step_({w.to(gpu())}, {w}, {}, SgdHyper()), DeviceError);
  EXPECT_THROW(adam_step_({w}, {w}, {w.to(gpu())}, {w}, AdamHyper()), DeviceError);
}

}  // namespace
}  // namespace tandem
