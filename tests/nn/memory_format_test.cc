// Memory formats: is_channels_last / to_channels_last / to_nchw, gradients through them, and NN ops
// returning their output in the input's format with the same values as in NCHW.
#include <gtest/gtest.h>

#include <functional>

#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "tests/nn/nn_test_util.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using testing::random_input;
using testing::values;

TEST(MemoryFormat, ConversionsKeepValuesAndSetStrides) {
  Generator gen(testing::fresh_seed());
  for (Shape s : {Shape{2, 3, 4, 5}, Shape{2, 1, 4, 4}, Shape{3, 5, 1, 1}}) {
    Tensor x = random_input(s, gen);
    EXPECT_FALSE(is_channels_last(x)) << shape_str(s);
    Tensor cl = to_channels_last(x);
    EXPECT_TRUE(is_channels_last(cl)) << shape_str(s);
    EXPECT_EQ(cl.strides(), (Shape{s[1] * s[2] * s[3], 1, s[3] * s[1], s[1]}));
    EXPECT_EQ(values(cl), values(x));
    EXPECT_TRUE(to_channels_last(cl).same(cl));
    Tensor back = to_nchw(cl);
    EXPECT_EQ(back.strides(), contiguous_strides(s));
    EXPECT_EQ(values(back), values(x));
    EXPECT_TRUE(to_nchw(back).same(back));
  }
  EXPECT_FALSE(is_channels_last(random_input({2, 3, 4}, gen)));
  EXPECT_THROW(to_channels_last(random_input({2, 3, 4}, gen)), ShapeError);
  EXPECT_THROW(to_nchw(random_input({2, 3}, gen)), ShapeError);
}

TEST(MemoryFormat, GradientsFlowThroughConversions) {
  Generator gen(testing::fresh_seed());
  Tensor x = random_input({2, 3, 4, 5}, gen).set_requires_grad();
  testing::expect_gradients_match([](const std::vector<Tensor>& in) { return to_nchw(to_channels_last(in[0])); }, {x});
}

TEST(MemoryFormat, OpsReturnTheInputFormat) {
  Generator gen(testing::fresh_seed());
  Tensor x = random_input({2, 4, 6, 6}, gen);
  Tensor xc = to_channels_last(x);
  Conv2dOptions co;
  co.pad_h = co.pad_w = 1;
  Tensor w = random_input({5, 4, 3, 3}, gen);
  Pool2dOptions po;
  Tensor bw = random_input({4}, gen), bb = random_input({4}, gen);
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
