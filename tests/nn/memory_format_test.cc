// Memory formats: is_channels_last / suggests_channels_last / to_channels_last / to_nchw strides (PyTorch's rules for
// size-1 dims), NN ops returning their output in the input's format with the same values as in NCHW, and
// convolutions reading channels-last weights without a copy (the conversions' values and gradients: op cases).
#include <gtest/gtest.h>

#include <functional>
#include <memory>

#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/layout.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

TEST(MemoryFormat, ConversionsKeepValuesAndSetStrides) {
  Generator gen(testing::fresh_seed());
  for (Shape s : {Shape{2, 3, 4, 5}, Shape{2, 1, 4, 4}, Shape{3, 5, 1, 1}, Shape{1, 3, 4, 5}}) {
    Tensor x = randn(s, gen, DType::F64);
    // With C = 1 or H = W = 1 the NCHW tensor is channels-last in memory too, but suggests NCHW.
    const bool both = s[1] == 1 || s[2] * s[3] == 1;
    EXPECT_EQ(is_channels_last(x), both) << shape_str(s);
    EXPECT_FALSE(suggests_channels_last(x)) << shape_str(s);
    const int64_t before = layout_conversion_count();
    Tensor cl = to_channels_last(x);
    EXPECT_EQ(layout_conversion_count() - before, both ? 0 : 1) << shape_str(s) << ": a view when both";
    EXPECT_EQ(cl.storage().same(x.storage()), both) << shape_str(s);
    EXPECT_TRUE(is_channels_last(cl) && suggests_channels_last(cl)) << shape_str(s);
    EXPECT_EQ(cl.strides(), (Shape{s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]}));
    EXPECT_EQ(cl.to_vector<double>(), x.to_vector<double>());
    EXPECT_TRUE(to_channels_last(cl).same(cl));
    Tensor back = to_nchw(cl);
    EXPECT_EQ(back.strides(), contiguous_strides(s));
    EXPECT_EQ(back.to_vector<double>(), x.to_vector<double>());
    EXPECT_TRUE(to_nchw(back).same(back));
  }
  EXPECT_FALSE(is_channels_last(randn({2, 3, 4}, gen, DType::F64)));
  EXPECT_THROW(to_channels_last(randn({2, 3, 4}, gen, DType::F64)), ShapeError);
  EXPECT_THROW(to_nchw(randn({2, 3}, gen, DType::F64)), ShapeError);
}

// Strides as given, on fresh storage: the cases of PyTorch's comments on its channels-last rules.
Tensor strided(const Shape& shape, const Shape& strides) {
  int64_t span = 1;
  for (size_t i = 0; i < shape.size(); ++i) span += (shape[i] - 1) * strides[i];
  return Tensor(std::make_shared<TensorImpl>(zeros({span}).storage(), 0, shape, strides, DType::F32));
}

TEST(MemoryFormat, SizeOneDimsFollowPyTorchsRules) {
  struct Case {
    Shape shape, strides;
    bool dense_nhwc, suggests;
  };
  const Case cases[] = {
      {{2, 3, 4, 5}, {60, 1, 15, 3}, true, true},    // NHWC
      {{2, 3, 4, 5}, {60, 20, 5, 1}, false, false},  // NCHW
      {{2, 3, 1, 1}, {3, 1, 1, 1}, true, false},     // NCHW [N, C, 1, 1]: both in memory, suggests NCHW
      {{2, 3, 1, 1}, {3, 1, 3, 3}, true, true},      // NHWC [N, C, 1, 1]
      {{1, 3, 4, 5}, {60, 1, 15, 3}, true, true},    // N = 1
      {{2, 1, 1, 1}, {1, 1, 1, 1}, true, false},     // N111 contiguous
      {{2, 1, 1, 1}, {5, 5, 5, 5}, false, false},    // N11W sliced on W: ambiguous, NCHW
      {{3, 1, 2, 1}, {2, 1, 1, 1}, true, true},      // N1H1 with channels-last strides
      {{3, 1, 2, 1}, {2, 2, 1, 1}, true, false},     // N1H1 contiguous
      {{1, 6, 1, 3}, {18, 1, 6, 6}, true, false},    // [1, C, 1, W] transposed (1, 3): suggests NCHW
      {{2, 3, 4, 5}, {120, 1, 30, 6}, false, true},  // channels-last strides with gaps (a slice of C)
  };
  for (const Case& c : cases) {
    const Tensor t = strided(c.shape, c.strides);
    EXPECT_EQ(is_channels_last(t), c.dense_nhwc) << shape_str(c.shape) << " @ " << shape_str(c.strides);
    EXPECT_EQ(suggests_channels_last(t), c.suggests) << shape_str(c.shape) << " @ " << shape_str(c.strides);
  }
}

TEST(MemoryFormat, ConvolutionsReadChannelsLastWeightsWithoutCopies) {
  Generator gen(testing::fresh_seed());
  const Tensor x = to_channels_last(randn({2, 4, 6, 6}, gen, DType::F64));
  const Tensor w_nchw = randn({5, 4, 3, 3}, gen, DType::F64);
  Conv2dOptions co;
  co.pad_h = co.pad_w = 1;
  for (bool weight_cl : {true, false}) {
    Tensor w = (weight_cl ? to_channels_last(w_nchw) : w_nchw).detach().set_requires_grad(true);
    Tensor xg = x.detach().set_requires_grad(true);
    const int64_t before = layout_conversion_count();
    Tensor y = conv2d(xg, w, Tensor(), co);
    y.backward(ones_like(y));
    const int64_t n = layout_conversion_count() - before;
    EXPECT_TRUE(is_channels_last(y) && is_channels_last(xg.grad()));
    EXPECT_EQ(w.grad().strides(), w.strides()) << "the weight's gradient in the weight's layout";
    // NCHW weights are copied to channels-last (the copy is saved for the data gradient), and the weight's
    // gradient back to NCHW.
    EXPECT_EQ(n, weight_cl ? 0 : 2) << (weight_cl ? "channels-last" : "NCHW") << " weights";
  }
  // An NCHW input with channels-last weights runs channels-last (PyTorch's rule: either suggests it).
  EXPECT_TRUE(suggests_channels_last(conv2d(to_nchw(x), to_channels_last(w_nchw), Tensor(), co)));
}

TEST(MemoryFormat, OpsReturnTheInputFormat) {
  Generator gen(testing::fresh_seed());
  Tensor x = randn({2, 4, 6, 6}, gen, DType::F64);
  Tensor xc = to_channels_last(x);
  Conv2dOptions co;
  co.pad_h = co.pad_w = 1;
  Tensor w = randn({5, 4, 3, 3}, gen, DType::F64);
  Pool2dOptions po;
  Tensor bw = randn({4}, gen, DType::F64), bb = randn({4}, gen, DType::F64);
  struct Op {
    const char* name;
    std::function<Tensor(const Tensor&)> f;
  };
  std::vector<Op> ops = {
      {"conv2d", [&](const Tensor& t) { return conv2d(t, w, Tensor(), co); }},
      {"batch_norm", [&](const Tensor& t) { return batch_norm(t, bw, bb, Tensor(), Tensor(), true, 0.1, 1e-5); }},
      {"max_pool2d", [&](const Tensor& t) { return max_pool2d(t, po); }},
      {"avg_pool2d", [&](const Tensor& t) { return avg_pool2d(t, po); }},
  };
  for (const Op& op : ops) {
    Tensor a = op.f(x), b = op.f(xc);
    EXPECT_FALSE(is_channels_last(a)) << op.name;
    EXPECT_TRUE(is_channels_last(b)) << op.name;
    testing::expect_close(b, a, 1e-12, op.name);
  }
}

}  // namespace
}  // namespace tandem
