// Memory formats: is_channels_last / to_channels_last / to_nchw strides, and NN ops returning their output in the
// input's format with the same values as in NCHW (the conversions' values and gradients: op cases).
#include <gtest/gtest.h>

#include <functional>

#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

TEST(MemoryFormat, ConversionsKeepValuesAndSetStrides) {
  Generator gen(testing::fresh_seed());
  for (Shape s : {Shape{2, 3, 4, 5}, Shape{2, 1, 4, 4}, Shape{3, 5, 1, 1}}) {
    Tensor x = randn(s, gen, DType::F64);
    EXPECT_FALSE(is_channels_last(x)) << shape_str(s);
    Tensor cl = to_channels_last(x);
    EXPECT_TRUE(is_channels_last(cl)) << shape_str(s);
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
