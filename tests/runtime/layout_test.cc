// Dense layouts kept (PyTorch's preserve_format): elementwise ops, their gradients, reductions, in-place updates,
// factories, device copies and accumulated gradients on channels-last and transposed tensors return the layout the
// rules say with the values of the contiguous computation, and layout_conversion_count counts exactly the copies of
// a dense tensor into another layout. On the CPU and on CUDA (skipped without a GPU).
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/layout.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using tandem::testing::expect_close;
using tandem::testing::fresh_seed;

// NHWC strides of an [N, C, H, W] shape: what a channels-last tensor has.
Shape nhwc(const Shape& s) { return {s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]}; }

// A random [N, C, H, W] tensor dense in NHWC order (a permuted view of an NHWC one).
Tensor channels_last(const Shape& s, Generator& gen, Device d) {
  return randn({s[0], s[2], s[3], s[1]}, gen, TensorOptions(DType::F64).with_device(d)).permute({0, 3, 1, 2});
}

// Layout conversions made by fn.
int64_t conversions_in(const std::function<void()>& fn) {
  const int64_t before = layout_conversion_count();
  fn();
  return layout_conversion_count() - before;
}

TEST(Layout, DenseMeansEveryElementOnceWithoutGaps) {
  Generator gen(fresh_seed());
  const Tensor x = randn({2, 3, 4, 5}, gen);
  EXPECT_TRUE(is_dense(x));
  EXPECT_TRUE(is_dense(x.permute({0, 2, 3, 1})));
  EXPECT_TRUE(is_dense(x.transpose(0, 3)));
  EXPECT_FALSE(is_dense(x.slice(3, 0, 4)));     // a gap after every row
  EXPECT_FALSE(is_dense(x.slice(3, 0, 5, 2)));  // every other element
  EXPECT_FALSE(is_dense(randn({3, 1}, gen).expand({3, 4})));
  EXPECT_FALSE(is_dense(empty({2, 0, 3})));
  // The strides of size-1 dims do not matter.
  EXPECT_TRUE(is_dense(Shape{4, 1, 3}, Shape{3, 100, 1}));
  EXPECT_TRUE(is_dense(Shape{1, 1}, Shape{7, 9}));
  EXPECT_FALSE(is_dense(Shape{4, 3}, Shape{4, 1}));  // overlapping rows

  const Tensor cl = channels_last({2, 3, 4, 5}, gen, Device::cpu());
  EXPECT_EQ(cl.strides(), nhwc({2, 3, 4, 5}));
  EXPECT_TRUE(same_layout(cl, cl.detach()));
  EXPECT_FALSE(same_layout(cl, x.to(DType::F64)));
  EXPECT_FALSE(same_layout(x, x.view({2, 3, 20})));  // another shape
  // [N, C, 1, 1] with NCHW or NHWC strides: the same memory order.
  const Tensor pooled = randn({2, 6, 1, 1}, gen);
  EXPECT_TRUE(same_layout(pooled, randn({2, 1, 1, 6}, gen).permute({0, 3, 1, 2})));
  EXPECT_EQ(memory_order(cl), (std::vector<int>{0, 2, 3, 1}));
  EXPECT_EQ(memory_order(x), (std::vector<int>{0, 1, 2, 3}));
}

class LayoutOn : public ::testing::TestWithParam<Device> {
 protected:
  void SetUp() override {
    if (GetParam().is_cuda()) TD_REQUIRE_GPU();
  }
  Device device() const { return GetParam(); }
  TensorOptions f64() const { return TensorOptions(DType::F64).with_device(device()); }
};

TEST_P(LayoutOn, FactoriesAndClonesKeepADenseLayout) {
  Generator gen(fresh_seed());
  const Tensor cl = channels_last({2, 3, 4, 5}, gen, device());
  for (const Tensor& t : {empty_like(cl), zeros_like(cl), ones_like(cl), full_like(cl, 2.5), cl.clone(),
                          cl.to(DType::F32), empty_like(cl, f64().with_dtype(DType::U8))})
    EXPECT_EQ(t.strides(), cl.strides());
  EXPECT_EQ(full_like(cl, 2.5).to_vector<double>(), std::vector<double>(cl.numel(), 2.5));
  Tensor copy;
  EXPECT_EQ(conversions_in([&] { copy = cl.clone(); }), 0);
  EXPECT_EQ(copy.to_vector<double>(), cl.to_vector<double>());
  // contiguous() of a channels-last tensor is a real conversion; of a non-dense one it is not.
  EXPECT_EQ(conversions_in([&] { EXPECT_TRUE(cl.contiguous().is_contiguous()); }), 1);
  const Tensor sliced = randn({4, 6}, gen, f64()).slice(1, 0, 6, 2);
  EXPECT_EQ(conversions_in([&] { EXPECT_TRUE(sliced.clone().is_contiguous()); }), 0);
  EXPECT_TRUE(empty_like(sliced).is_contiguous());
  // A device copy keeps the layout too.
  const Device other = device().is_cuda() ? Device::cpu() : device();
  EXPECT_EQ(conversions_in([&] { EXPECT_EQ(cl.to(other).strides(), cl.strides()); }), 0);
}

TEST_P(LayoutOn, UnaryOpsAndTheirGradientsKeepTheLayout) {
  Generator gen(fresh_seed());
  const Tensor cl = channels_last({2, 3, 4, 5}, gen, device());
  const Tensor t2 = randn({5, 7}, gen, f64()).t();  // a transposed matrix: dense, column-major
  const std::vector<std::pair<const char*, std::function<Tensor(const Tensor&)>>> ops = {
      {"relu", [](const Tensor& x) { return relu(x); }},      {"relu6", [](const Tensor& x) { return relu6(x); }},
      {"neg", [](const Tensor& x) { return neg(x); }},        {"exp", [](const Tensor& x) { return exp(x); }},
      {"x * 3", [](const Tensor& x) { return mul(x, 3.0); }}, {"abs", [](const Tensor& x) { return abs(x); }},
  };
  for (const Tensor& input : {cl, t2}) {
    for (const auto& op : ops) {
      const std::string what = std::string(op.first) + " on strides " + shape_str(input.strides());
      Tensor x = input.detach().set_requires_grad(true);
      Tensor y, gy = randn(input.shape(), gen, f64());  // a contiguous gradient: the saved operand is not
      Tensor gy_same = in_layout_of(gy, input);
      int64_t n = conversions_in([&] {
        y = op.second(x);
        y.backward(gy_same);
      });
      EXPECT_EQ(n, 0) << what;
      EXPECT_EQ(y.strides(), input.strides()) << what;
      EXPECT_EQ(x.grad().strides(), input.strides()) << what;
      // The values of the contiguous computation.
      Tensor xc = input.contiguous().detach().set_requires_grad(true);
      Tensor yc = op.second(xc);
      yc.backward(gy);
      expect_close(y, yc, 1e-15, what);
      expect_close(x.grad(), xc.grad(), 1e-15, what + ": gradient");
      // A gradient in another layout than the saved operand: the same values, and the leaf's gradient in the
      // leaf's layout.
      Tensor x2 = input.detach().set_requires_grad(true);
      op.second(x2).backward(gy);
      EXPECT_EQ(x2.grad().strides(), input.strides()) << what;
      expect_close(x2.grad(), xc.grad(), 1e-15, what + ": gradient from a gradient in another layout");
    }
  }
}

TEST_P(LayoutOn, BinaryOpsFollowTheFirstDenseOperandOfTheOutputShape) {
  Generator gen(fresh_seed());
  const Shape s = {2, 3, 4, 5};
  const Tensor cl = channels_last(s, gen, device()), nchw = randn(s, gen, f64());
  const Tensor bias = randn({1, 3, 1, 1}, gen, f64()), row = randn({5}, gen, f64());
  struct Case {
    const char* what;
    std::function<Tensor()> op, reference;  // the op, and the same on contiguous operands
    Shape strides;
  };
  const Tensor clc = cl.contiguous();
  const std::vector<Case> cases = {
      {"cl + bias", [&] { return add(cl, bias); }, [&] { return add(clc, bias); }, nhwc(s)},
      {"bias + cl (the dense operand wins)", [&] { return add(bias, cl); }, [&] { return add(bias, clc); }, nhwc(s)},
      {"row * cl", [&] { return mul(row, cl); }, [&] { return mul(row, clc); }, nhwc(s)},
      {"cl - nchw (the first operand wins)", [&] { return sub(cl, nchw); }, [&] { return sub(clc, nchw); }, nhwc(s)},
      {"nchw / cl", [&] { return div(nchw, cl); }, [&] { return div(nchw, clc); }, contiguous_strides(s)},
      {"maximum(cl, cl)", [&] { return maximum(cl, cl * 0.5); }, [&] { return maximum(clc, clc * 0.5); }, nhwc(s)},
      {"cl > nchw", [&] { return gt(cl, nchw); }, [&] { return gt(clc, nchw); }, nhwc(s)},
      {"where(cl > 0, cl, bias)", [&] { return where(gt(cl, zeros({}, f64())), cl, bias); },
       [&] { return where(gt(clc, zeros({}, f64())), clc, bias); }, nhwc(s)},
  };
  for (const Case& c : cases) {
    Tensor y;
    EXPECT_EQ(conversions_in([&] { y = c.op(); }), 0) << c.what;
    EXPECT_EQ(y.strides(), c.strides) << c.what;
    expect_close(y.to(DType::F64), c.reference().to(DType::F64), 1e-15, c.what);
  }
}

TEST_P(LayoutOn, AddsGradientsAndReductionsKeepChannelsLastWithoutCopies) {
  Generator gen(fresh_seed());
  const Shape s = {2, 3, 4, 5};
  Tensor a = channels_last(s, gen, device()).detach().set_requires_grad(true);
  Tensor b = channels_last(s, gen, device()).detach().set_requires_grad(true);
  Tensor bias = randn({1, 3, 1, 1}, gen, f64()).set_requires_grad(true);
  Tensor g = channels_last(s, gen, device());
  Tensor y;
  EXPECT_EQ(conversions_in([&] {
              y = add(add(relu(a), b), bias);
              y.backward(g);
            }),
            0);
  EXPECT_EQ(y.strides(), nhwc(s));
  EXPECT_EQ(b.grad().strides(), nhwc(s));
  EXPECT_EQ(a.grad().strides(), nhwc(s));
  // The bias's gradient sums g over N, H and W: read in NHWC order as [1, N*H*W, C], no copy.
  expect_close(bias.grad(), sum(g.contiguous(), {0, 2, 3}, true), 1e-14, "sum over (N, H, W)");
  const Tensor want = sum(g.contiguous(), {0, 2, 3});
  Tensor got;
  EXPECT_EQ(conversions_in([&] { got = sum(g, {0, 2, 3}); }), 0);
  expect_close(got, want, 1e-14, "sum over (N, H, W), not kept");
  // Sums the NHWC order cannot read as one run still give the right values (through a copy).
  expect_close(sum(g, {1, 2}), sum(g.contiguous(), {1, 2}), 1e-14, "sum over (C, H)");
  expect_close(sum(g, {3}), sum(g.contiguous(), {3}), 1e-14, "sum over W");
}

TEST_P(LayoutOn, InPlaceUpdatesKeepTheLayout) {
  Generator gen(fresh_seed());
  const Shape s = {2, 3, 4, 5};
  Tensor x = channels_last(s, gen, device());
  const Tensor x0 = x.contiguous(), y = randn(s, gen, f64()), ycl = in_layout_of(y, x);
  EXPECT_EQ(conversions_in([&] {
              add_(x, ycl, 2.0);
              add_(x, y);  // another layout: read strided
              mul_(x, 0.5);
            }),
            0);
  EXPECT_EQ(x.strides(), nhwc(s));
  expect_close(x, mul(add(add(x0, mul(y, 2.0)), y), 0.5), 1e-15, "x = (x + 2y + y) / 2");
}

TEST_P(LayoutOn, CopiesBetweenDenseLayoutsAreCounted) {
  Generator gen(fresh_seed());
  const Tensor cl = channels_last({2, 3, 4, 5}, gen, device());
  Tensor dst = empty({2, 3, 4, 5}, f64());
  EXPECT_EQ(conversions_in([&] { dst.copy_(cl); }), 1);
  EXPECT_EQ(dst.to_vector<double>(), cl.to_vector<double>());
  EXPECT_EQ(conversions_in([&] { dst.copy_(cl.contiguous()); }), 1) << "contiguous() is the conversion";
  EXPECT_EQ(conversions_in([&] { dst.copy_(randn({3, 1, 1}, gen, f64())); }), 0) << "a broadcast";
  Tensor cl2 = empty_like(cl);
  EXPECT_EQ(conversions_in([&] { cl2.copy_(cl); }), 0) << "the same layout";
  // A [N, C, 1, 1] tensor is both NCHW and channels-last: no conversion either way.
  const Tensor pooled = randn({2, 6, 1, 1}, gen, f64());
  Tensor pooled_cl = randn({2, 1, 1, 6}, gen, f64()).permute({0, 3, 1, 2});
  EXPECT_EQ(conversions_in([&] { pooled_cl.copy_(pooled); }), 0);
}

TEST_P(LayoutOn, GradientsOfLeavesHaveTheLeafLayout) {
  Generator gen(fresh_seed());
  Tensor w = channels_last({4, 3, 2, 2}, gen, device()).detach().set_requires_grad(true);
  const Tensor c = randn({4, 3, 2, 2}, gen, f64());
  sum(mul(c, w)).backward();  // mul's gradient for w comes in c's layout
  EXPECT_EQ(w.grad().strides(), w.strides());
  expect_close(w.grad(), c, 1e-15, "d sum(c * w) / dw");
  sum(mul(c, w)).backward();
  EXPECT_EQ(w.grad().strides(), w.strides());
  expect_close(w.grad(), mul(c, 2.0), 1e-15, "accumulated");
  // A linear layer's weight gradient comes in the weight's row-major layout: no copy.
  Tensor weight = randn({5, 7}, gen, f64()).set_requires_grad(true);
  const Tensor x = randn({3, 7}, gen, f64());
  EXPECT_EQ(conversions_in([&] { sum(linear(x, weight)).backward(); }), 0);
  EXPECT_TRUE(weight.grad().is_contiguous());
  expect_close(weight.grad(), sum(x, {0}, true).expand({5, 7}), 1e-14, "d sum(x w^T) / dw");
}

INSTANTIATE_TEST_SUITE_P(Devices, LayoutOn, ::testing::Values(Device::cpu(), Device::cuda()),
                         [](const ::testing::TestParamInfo<Device>& i) {
                           return std::string(i.param.is_cuda() ? "Cuda" : "Cpu");
                         });

}  // namespace
}  // namespace tandem
