// batch_norm_act against batch_norm + add + relu/relu6 (outputs, running statistics, every gradient including the
// residual's) on the CPU and the simulated GPU, NCHW and NHWC, f64 and f32; bf16 activations bitwise against the f32
// kernels on widened copies; the fused kernels' determinism, their writes against their declarations, and that one
// fused call replaces the unfused op's kernels.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "kernels/cuda/nn/cuda_nn_backend.h"
#include "runtime/base/config.h"
#include "runtime/base/error.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "tests/harness/call_counts.h"
#include "tests/harness/kernel_record.h"
#include "tests/harness/write_check.h"
#include "tests/testing.h"

namespace tandem {
namespace {

struct Case {
  Device device;
  DType dtype;
  bool channels_last;
  BnActivation act;
  bool residual;
  bool training;
};

std::string name_of(const Case& k) {
  static const char* acts[] = {"none", "relu", "relu6"};
  return std::string(k.device.type == DeviceType::CUDA ? "cuda" : "cpu") + " " + dtype_name(k.dtype) +
         (k.channels_last ? " nhwc " : " nchw ") + acts[static_cast<int>(k.act)] + (k.residual ? " residual" : "") +
         (k.training ? " train" : " eval");
}

// The inputs of one case: x, weight, bias, running statistics, residual and the output's gradient.
struct Inputs {
  Tensor x, w, b, rm, rv, r, gy;
};

// Random shapes: odd channel counts, planes of sizes that are no multiple of a vector.
Inputs make_inputs(const Case& k, Generator& gen) {
  auto in = [&](int64_t lo, int64_t hi) { return lo + static_cast<int64_t>(gen.integer(hi - lo + 1)); };
  const int64_t n = in(2, 4), c = 2 * in(0, 4) + 1, h = in(1, 6), w = in(2, 6);
  auto activation = [&](double scale) {
    Tensor t = mul(randn({n, c, h, w}, gen, DType::F64), scale).to(k.dtype).to(k.device);
    return k.channels_last ? to_channels_last(t) : t;
  };
  auto channel = [&](double lo) { return add(mul(rand({c}, gen, DType::F64), 2.0), lo).to(k.dtype).to(k.device); };
  // Shifted and scaled so that ReLU6 clamps some values at 6 as well as at 0.
  return Inputs{add(activation(3.0), 1.0),
                channel(0.5),
                channel(-1.0),
                channel(-1.0),
                channel(0.5),
                k.residual ? activation(2.0) : Tensor(),
                activation(1.0)};
}

struct Result {
  Tensor y, rm, rv, dx, dw, db, dr;
};

Result run(const Case& k, const Inputs& in, bool fused) {
  Tensor x = in.x.clone().set_requires_grad(), w = in.w.clone().set_requires_grad();
  Tensor b = in.b.clone().set_requires_grad();
  Tensor r = k.residual ? in.r.clone().set_requires_grad() : Tensor();
  Result out;
  out.rm = in.rm.clone();
  out.rv = in.rv.clone();
  if (fused) {
    out.y = batch_norm_act(x, w, b, out.rm, out.rv, r, k.act, k.training, 0.1, 1e-5);
  } else {
    out.y = batch_norm(x, w, b, out.rm, out.rv, k.training, 0.1, 1e-5);
    if (k.residual) out.y = add(out.y, r);
    if (k.act == BnActivation::Relu) out.y = relu(out.y);
    if (k.act == BnActivation::Relu6) out.y = relu6(out.y);
  }
  out.y.backward(in.gy);
  out.dx = x.grad();
  out.dw = w.grad();
  out.db = b.grad();
  if (k.residual) out.dr = r.grad();
  return out;
}

// Every output of two runs (the residual's gradient with `residual`) bitwise equal.
void expect_bitwise_equal(const Result& got, const Result& want, bool residual) {
  testing::expect_bitwise_equal(got.y, want.y, "y");
  testing::expect_bitwise_equal(got.rm, want.rm, "running_mean");
  testing::expect_bitwise_equal(got.rv, want.rv, "running_var");
  testing::expect_bitwise_equal(got.dx, want.dx, "dx");
  testing::expect_bitwise_equal(got.dw, want.dw, "dweight");
  testing::expect_bitwise_equal(got.db, want.db, "dbias");
  if (residual) testing::expect_bitwise_equal(got.dr, want.dr, "dresidual");
}

std::vector<Case> cases(Device device) {
  std::vector<Case> all;
  for (DType t : {DType::F64, DType::F32})
    for (bool cl : {false, true})
      for (BnActivation act : {BnActivation::None, BnActivation::Relu, BnActivation::Relu6})
        for (bool residual : {false, true})
          for (bool training : {true, false})
            if (act != BnActivation::None || residual) all.push_back({device, t, cl, act, residual, training});
  return all;
}

void expect_fused_equals_unfused(Device device) {
  Generator gen(testing::fresh_seed());
  for (const Case& k : cases(device)) {
    SCOPED_TRACE(name_of(k));
    Inputs in = make_inputs(k, gen);
    Result want = run(k, in, false), got;
    {
      testing::WriteCheck check;
      got = run(k, in, true);
    }
    // f64 agrees to its rounding; f32 differs by the unfused op's roundings of the intermediate values.
    const double tol = k.dtype == DType::F64 ? 1e-12 : 2e-5;
    EXPECT_EQ(got.y.strides(), want.y.strides());
    testing::expect_close(got.y, want.y, tol, "y");
    testing::expect_close(got.rm, want.rm, tol, "running_mean");
    testing::expect_close(got.rv, want.rv, tol, "running_var");
    testing::expect_close(got.dx, want.dx, 10 * tol, "dx");
    testing::expect_close(got.dw, want.dw, tol, "dweight");
    testing::expect_close(got.db, want.db, tol, "dbias");
    if (k.residual) testing::expect_close(got.dr, want.dr, tol, "dresidual");
  }
}

TEST(BatchNormAct, FusedEqualsUnfusedOnCpu) { expect_fused_equals_unfused(Device::cpu()); }

TEST(BatchNormAct, FusedEqualsUnfusedOnCuda) {
  TD_REQUIRE_GPU();
  expect_fused_equals_unfused(Device::cuda());
}

// Where the backward recomputes the activation's mask from x (training, no residual) instead of reading the output,
// it must take the forward's decision bit for bit. Pre-activations at the threshold: x takes four values, and each
// channel's bias cancels the rounded product (x - mean) * weight * invstd of one of them (read from a plain batch
// norm's output), so that those elements' pre-activations are that product's rounding error: zero or a tiny value of
// either sign, which any other arithmetic (a multiply and an add rounded apart, a scale rounded differently) decides
// differently for about half of the channels. For ReLU6 the bias puts them at 6 instead. The fused gradients against
// the unfused ones, whose ReLU masks with the output it reads.
TEST(BatchNormAct, BackwardRecomputesTheForwardsMaskBitForBit) {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda());
  Generator gen(testing::fresh_seed());
  for (Device d : devices)
    for (DType t : {DType::F64, DType::F32, DType::BF16})
      for (bool cl : {false, true})
        for (BnActivation act : {BnActivation::Relu, BnActivation::Relu6}) {
          const Case k{d, t, cl, act, false, true};
          SCOPED_TRACE(name_of(k));
          const DType pt = BatchNormGeometry{t}.param_dtype();
          // Vector paths (16-byte NHWC rows and NCHW planes) and scalar ones.
          const int64_t n = 2 + gen.integer(3), c = gen.integer(2) == 0 ? 5 : 8, h = 4, w = 3 + gen.integer(2);
          Tensor levels = zeros({n, c, h, w}, DType::F64);
          {
            std::vector<double> v(static_cast<size_t>(levels.numel()));
            for (double& e : v) e = 0.7 * (static_cast<double>(gen.integer(4)) - 1.0);
            levels = from_vector(v, {n, c, h, w});
          }
          auto place = [&](const Tensor& x) { return cl ? to_channels_last(x.to(d)) : x.to(d); };
          const Tensor x = place(levels.to(t)), weight = add(mul(rand({c}, gen, DType::F64), 2.0), 0.5).to(pt).to(d);
          // The rounded products, from the kernels' own arithmetic on x's values in P (bias 0, no activation).
          const Tensor product =
              batch_norm(place(levels.to(t).to(pt)), weight, zeros({c}, pt).to(d), Tensor(), Tensor(), true, 0.1, 1e-5);
          const std::vector<double> at = product.select(0, 0).select(1, 0).select(1, 0).to_vector<double>();
          std::vector<double> bias(static_cast<size_t>(c));
          for (int64_t j = 0; j < c; ++j) bias[j] = (act == BnActivation::Relu6 ? 6.0 : 0.0) - at[j];
          const Tensor b = from_vector(bias, {c}).to(pt).to(d);
          auto gy = [&] { return place(randn({n, c, h, w}, gen, DType::F64).to(t)); };
          const Inputs in{x, weight, b, zeros({c}, pt).to(d), add(zeros({c}, pt), 1.0).to(d), Tensor(), gy()};
          const Result want = run(k, in, false), got = run(k, in, true);
          testing::expect_bitwise_equal(got.y, want.y, "y");
          const double tol = t == DType::F64 ? 1e-12 : t == DType::F32 ? 2e-5 : 1e-2;
          testing::expect_close(got.dx, want.dx, 10 * tol, "dx");
          testing::expect_close(got.dw, want.dw, tol, "dweight");
          testing::expect_close(got.db, want.db, tol, "dbias");
        }
}

// Small inputs have their partial sums finalized inside the apply passes (cuda::set_batch_norm_fold_limit): every
// output, saved and running statistic and gradient is bitwise what the finalize kernels give, for both layouts, the
// vector and scalar paths, f64, f32 and bf16, each epilogue, training and evaluation; and no finalize kernel runs.
TEST(BatchNormAct, ApplyPassesFinalizeSmallInputsBitwiseAsTheKernels) {
  TD_REQUIRE_GPU();
  Generator gen(testing::fresh_seed());
  struct Limit {
    explicit Limit(int64_t v) : was(cuda::set_batch_norm_fold_limit(v)) {}
    ~Limit() { cuda::set_batch_norm_fold_limit(was); }
    int64_t was;
  };
  for (DType t : {DType::F64, DType::F32, DType::BF16})
    for (bool cl : {false, true})
      for (BnActivation act : {BnActivation::None, BnActivation::Relu, BnActivation::Relu6})
        for (bool residual : {false, true})
          for (bool training : {true, false}) {
            const Case k{Device::cuda(), t, cl, act, residual, training};
            SCOPED_TRACE(name_of(k));
            Inputs in = make_inputs(k, gen);
            // bf16 activations take f32 parameters and statistics.
            if (t == DType::BF16)
              for (Tensor* p : {&in.w, &in.b, &in.rm, &in.rv}) *p = p->to(DType::F32);
            Result kernels, folded;
            std::vector<std::string> unfolded_names, folded_names;
            {
              Limit never(0);
              unfolded_names = testing::kernels_run([&] { kernels = run(k, in, true); });
            }
            {
              Limit always(int64_t{1} << 40);
              folded_names = testing::kernels_run([&] { folded = run(k, in, true); });
            }
            if (testing::kernel_record_available()) {
              // evaluation: the backward's alone
              EXPECT_EQ(testing::count_containing(unfolded_names, "finalize_"), training ? 2 : 1);
              EXPECT_EQ(testing::count_containing(folded_names, "finalize_"), 0);
            }
            expect_bitwise_equal(folded, kernels, residual);
          }
}

// x's values in a view one element into a larger buffer on x's device (data not 16-byte aligned), in x's layout.
Tensor misaligned(const Tensor& x, bool channels_last) {
  Tensor big = zeros({x.numel() + 1}, x.options()), flat = big.narrow(0, 1, x.numel());
  const Shape& s = x.shape();
  Tensor v = channels_last ? flat.view({s[0], s[2], s[3], s[1]}).permute({0, 3, 1, 2}) : flat.view(s);
  v.copy_(x);
  return v;
}

// The CUDA kernels' vector paths (16-byte accesses along NCHW planes with hw % 4 == 0 and NHWC rows with
// c % 4 == 0, and the same order in scalar accesses where an operand is not 16-byte aligned) against the CPU's.
TEST(BatchNormAct, CudaMatchesCpuOnEveryVectorPath) {
  TD_REQUIRE_GPU();
  Generator gen(testing::fresh_seed());
  for (DType t : {DType::F32, DType::F64})
    for (bool cl : {false, true}) {
      Case k{Device::cpu(), t, cl, BnActivation::Relu6, true, true};
      SCOPED_TRACE(name_of(k));
      const int64_t n = 3, c = 4 * (1 + static_cast<int64_t>(gen.integer(4))), w = 2 + gen.integer(3);
      auto activation = [&](double scale, double shift) {
        Tensor x = add(mul(randn({n, c, 4, w}, gen, DType::F64), scale), shift).to(t);
        return cl ? to_channels_last(x) : x;
      };
      auto channel = [&](double lo) { return add(mul(rand({c}, gen, DType::F64), 2.0), lo).to(t); };
      const Inputs in{activation(3.0, 1.0), channel(0.5),         channel(-1.0),       channel(-1.0),
                      channel(0.5),         activation(2.0, 0.0), activation(1.0, 0.0)};
      auto gpu = [](const Tensor& x) { return x.to(Device::cuda()); };
      const double tol = t == DType::F64 ? 1e-11 : 2e-5;
      for (bool aligned : {true, false}) {
        SCOPED_TRACE(aligned ? "aligned" : "misaligned");
        // Training forward and backward; misaligned: the output's gradient (the backward's dy) is not aligned.
        k.device = Device::cpu();
        const Result want = run(k, in, true);
        k.device = Device::cuda();
        Inputs g{gpu(in.x), gpu(in.w), gpu(in.b), gpu(in.rm), gpu(in.rv), gpu(in.r), gpu(in.gy)};
        if (!aligned) g.gy = misaligned(g.gy, cl);
        const Result got = run(k, g, true);
        testing::expect_close(got.y, want.y, tol, "y");
        testing::expect_close(got.rm, want.rm, tol, "running_mean");
        testing::expect_close(got.rv, want.rv, tol, "running_var");
        testing::expect_close(got.dx, want.dx, 10 * tol, "dx");
        testing::expect_close(got.dw, want.dw, tol, "dweight");
        testing::expect_close(got.db, want.db, tol, "dbias");
        testing::expect_close(got.dr, want.dr, tol, "dresidual");
        // Forward alone, training and evaluation; misaligned: x and the residual are not aligned.
        for (bool training : {true, false}) {
          auto fwd = [&](const Inputs& u, bool move) {
            auto at = [&](const Tensor& x) { return move ? gpu(x) : x.clone(); };
            auto act = [&](const Tensor& x) { return aligned ? at(x) : misaligned(at(x), cl); };
            return batch_norm_act(act(u.x), at(u.w), at(u.b), at(u.rm), at(u.rv), act(u.r), BnActivation::Relu6,
                                  training, 0.1, 1e-5);
          };
          testing::expect_close(fwd(in, true), fwd(in, false), tol, training ? "y (training)" : "y (evaluation)");
        }
      }
    }
}

TEST(BatchNormAct, CudaRunsAreBitwiseEqual) {
  TD_REQUIRE_GPU();
  Generator gen(testing::fresh_seed());
  for (DType t : {DType::F32, DType::F64})
    for (bool cl : {false, true}) {
      Case k{Device::cuda(), t, cl, BnActivation::Relu, true, true};
      SCOPED_TRACE(name_of(k));
      Inputs in = make_inputs(k, gen);
      expect_bitwise_equal(run(k, in, true), run(k, in, true), true);
    }
}

// The former bf16 path written out: the f32 kernels on widened copies of x, the residual and dy, each bf16 result
// (y, dx, dresidual) rounded once, and backward's activation mask read from the rounded y (what backward kept).
Result widened_reference(const Case& k, const Inputs& in, bool fused) {
  auto wide = [&](const Tensor& t) {
    if (!t.defined()) return t;
    const Tensor w = t.to(DType::F32);
    return k.channels_last ? to_channels_last(w) : w.contiguous();
  };
  const Tensor x = wide(in.x), r = wide(in.r), dy = wide(in.gy);
  auto ptr = [](const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; };
  BatchNormGeometry g;
  g.channels_last = k.channels_last;
  g.n = x.shape()[0];
  g.c = x.shape()[1];
  g.hw = x.shape()[2] * x.shape()[3];
  NNBackend& nn = nn_backend_for(k.device);
  const Stream s = current_stream(k.device);
  Result out;
  out.rm = in.rm.clone();
  out.rv = in.rv.clone();
  Tensor y = x.clone(), stats = zeros({2, g.c}, in.w.options()), mean = out.rm, invstd;
  if (k.training) {
    mean = stats.select(0, 0);
    invstd = stats.select(0, 1);
    const BatchNormTrainArgs a{g,
                               x.raw_data(),
                               in.w.raw_data(),
                               in.b.raw_data(),
                               1e-5,
                               0.1,
                               out.rm.raw_data(),
                               out.rv.raw_data(),
                               y.raw_data(),
                               mean.raw_data(),
                               invstd.raw_data()};
    fused ? nn.batch_norm_act_forward_train({a, ptr(r), k.act}, s) : nn.batch_norm_forward_train(a, s);
  } else {
    invstd = rdiv(1.0, sqrt(add(out.rv, 1e-5)));
    const BatchNormEvalArgs a{
        g, x.raw_data(), in.w.raw_data(), in.b.raw_data(), out.rm.raw_data(), out.rv.raw_data(), 1e-5, y.raw_data()};
    fused ? nn.batch_norm_act_forward_eval({a, ptr(r), k.act}, s) : nn.batch_norm_forward_eval(a, s);
  }
  out.y = y.to(DType::BF16);
  const Tensor kept = wide(out.y);
  Tensor dx = x.clone(), dr = x.clone();
  out.dw = zeros_like(in.w);
  out.db = zeros_like(in.w);
  const BatchNormBackwardArgs a{g,         k.training,        x.raw_data(),  dy.raw_data(),     in.w.raw_data(),
                                ptr(mean), invstd.raw_data(), dx.raw_data(), out.dw.raw_data(), out.db.raw_data()};
  // y read back (not recomputed from x): both kernels mask with the bf16 output.
  fused ? nn.batch_norm_act_backward({a, kept.raw_data(), k.act, false, dr.raw_data(), in.b.raw_data(), false}, s)
        : nn.batch_norm_backward(a, s);
  out.dx = dx.to(DType::BF16);
  out.dr = dr.to(DType::BF16);
  return out;
}

// bf16 activations with f32 parameters and statistics (the native bf16 kernels) against the f32 kernels on widened
// copies with each bf16 result rounded once (x, residual and dy widened exactly; y, dx and dresidual rounded to
// nearest even): the same rounding points, so every output is bitwise equal. On the CPU both run the same kernels
// (the vectorized NCHW ones with oneDNN on, the plain ones otherwise), in the same order. On CUDA the bf16 sums run
// 8 elements a vector where f32 runs 4; the sums are in double (the forward's of bf16 values exact), so an f32
// statistic could differ by one step only where the double sums' rounding (2^-50 relative) crosses an f32 rounding
// boundary, about 2^-26 per value. Shapes: vector paths (planes and rows a multiple of 8 long) and scalar ones.
void expect_bf16_equals_widened(Device d, Generator& gen) {
  // (activation, residual): the plain batch norm first, then the fused kernels' epilogues.
  const std::pair<BnActivation, bool> kFusions[] = {{BnActivation::None, false},
                                                    {BnActivation::None, true},
                                                    {BnActivation::Relu, true},
                                                    {BnActivation::Relu6, false},
                                                    {BnActivation::Relu6, true}};
  for (bool cl : {false, true})
    for (const Shape& shape : {Shape{3, 8, 4, 4}, Shape{2, 5, 3, 3}})
      for (const std::pair<BnActivation, bool>& fused : kFusions)
        for (bool training : {true, false}) {
          if (shape[1] != 8 && fused.first == BnActivation::Relu) continue;  // the scalar paths: fewer cases
          if (shape[1] != 8 && fused.first != BnActivation::None && !fused.second) continue;
          const BnActivation act = fused.first;
          const bool residual = fused.second;
          Case k{d, DType::BF16, cl, act, residual, training};
          SCOPED_TRACE(name_of(k) + " " + shape_str(shape));
          auto activation = [&](double scale, double shift) {
            Tensor t = add(mul(randn(shape, gen, DType::F64), scale), shift).to(DType::BF16).to(d);
            return cl ? to_channels_last(t) : t;
          };
          auto channel = [&](double lo) {
            return add(mul(rand({shape[1]}, gen, DType::F64), 2.0), lo).to(DType::F32).to(d);
          };
          const Inputs in{activation(3.0, 1.0), channel(0.5), channel(-1.0),
                          channel(-1.0),        channel(0.5), residual ? activation(2.0, 0.0) : Tensor(),
                          activation(1.0, 0.0)};
          Result got;
          {
            testing::WriteCheck check;  // the bf16 kernels' writes against their operands() declarations
            got = run(k, in, act != BnActivation::None || residual);
          }
          const Result want = widened_reference(k, in, act != BnActivation::None || residual);
          ASSERT_EQ(got.y.dtype(), DType::BF16);
          ASSERT_EQ(got.dw.dtype(), DType::F32);
          expect_bitwise_equal(got, want, residual);
        }
}

TEST(BatchNormAct, Bf16KernelsEqualTheF32KernelsOnWidenedCopies) {
  Generator gen(testing::fresh_seed());
  const bool onednn = cpu_onednn();
  for (bool fast : {true, false}) {
    SCOPED_TRACE(fast ? "CPU vectorized kernels on" : "CPU plain kernels");
    set_cpu_onednn(fast);
    expect_bf16_equals_widened(Device::cpu(), gen);
  }
  set_cpu_onednn(onednn);
  if (cuda_available()) expect_bf16_equals_widened(Device::cuda(), gen);
}

TEST(BatchNormAct, OneFusedCallEachWayReplacesTheUnfusedKernels) {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda());
  Generator gen(testing::fresh_seed());
  for (Device d : devices) {
    Case k{d, DType::F32, true, BnActivation::Relu, true, true};
    SCOPED_TRACE(name_of(k));
    Inputs in = make_inputs(k, gen);
    testing::CallCounts calls(d.type);
    run(k, in, true);
    EXPECT_EQ(calls.of("batch_norm_act_forward_train"), 1);
    EXPECT_EQ(calls.of("batch_norm_act_backward"), 1);
    EXPECT_EQ(calls.of("batch_norm_forward_train") + calls.of("batch_norm_backward"), 0);
    const int fused_total = calls.total();
    calls.clear();
    run(k, in, false);
    EXPECT_EQ(calls.of("batch_norm_forward_train"), 1);
    // The unfused op adds an add and a ReLU forward and a ReLU backward at least.
    EXPECT_GE(calls.total(), fused_total + 3);
  }
}

// accumulate_dresidual adds the masked gradient to what dresidual holds (the shortcut's other gradient) in place;
// for bf16 in f32, rounded once (as add).
TEST(BatchNormAct, BackwardAccumulatesTheResidualGradientInPlace) {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda());
  Generator gen(testing::fresh_seed());
  for (Device d : devices)
    for (DType dtype : {DType::F64, DType::BF16}) {
      SCOPED_TRACE(d.str() + " " + dtype_name(dtype));
      BatchNormGeometry g;
      g.dtype = dtype;
      g.n = 3;
      g.c = 5;
      g.hw = 7;
      auto t = [&](Shape s) { return randn(s, gen, DType::F64).to(dtype).to(d); };
      auto p = [&](Shape s) { return randn(s, gen, DType::F64).to(g.param_dtype()).to(d); };
      Tensor x = t({3, 5, 7}), dy = t({3, 5, 7}), y = relu(t({3, 5, 7})), w = p({5}), mean = p({5});
      Tensor invstd = add(rand({5}, gen, DType::F64), 0.5).to(g.param_dtype()).to(d), other = t({3, 5, 7});
      Tensor written = zeros_like(x), accumulated = other.clone();
      NNBackend& nn = nn_backend_for(d);
      for (bool accumulate : {false, true}) {
        Tensor& dres = accumulate ? accumulated : written;
        nn.batch_norm_act_backward({{g, true, x.raw_data(), dy.raw_data(), w.raw_data(), mean.raw_data(),
                                     invstd.raw_data(), nullptr, nullptr, nullptr},
                                    y.raw_data(),
                                    BnActivation::Relu,
                                    accumulate,
                                    dres.raw_data(),
                                    nullptr,
                                    false},
                                   current_stream(d));
      }
      const Tensor y64 = y.to(DType::F64), dy64 = dy.to(DType::F64);
      testing::expect_bitwise_equal(written, where(gt(y64, zeros_like(y64)), dy64, zeros_like(dy64)).to(dtype),
                                    "written");
      testing::expect_bitwise_equal(accumulated, add(other, written), "accumulated");
    }
}

TEST(BatchNormAct, RejectsABadResidual) {
  Generator gen(testing::fresh_seed());
  Tensor x = randn({4, 3, 2, 2}, gen, DType::F32), v3 = ones({3});
  testing::expect_error<ShapeError>(
      [&] {
        batch_norm_act(x, v3, v3, v3, v3, randn({4, 3, 2, 1}, gen, DType::F32), BnActivation::Relu, true, 0.1, 1e-5);
      },
      "residual");
  testing::expect_error<DTypeError>(
      [&] {
        batch_norm_act(x, v3, v3, v3, v3, randn({4, 3, 2, 2}, gen, DType::F64), BnActivation::Relu, true, 0.1, 1e-5);
      },
      "residual");
}

}  // namespace
}  // namespace tandem
