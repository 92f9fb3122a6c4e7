// conv2d on the CPU beyond its op cases (nn_cases_conv.cc): the weight gradient over many chunks,
// thread-count independence and error paths.
#include <gtest/gtest.h>

#include "runtime/base/error.h"
#include "runtime/base/parallel_for.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/harness/gradient_check.h"
#include "tests/testing.h"

namespace tandem {
namespace {

// The weight gradient sums its chunks' partial GEMMs in at most 8 slots (kernels/cpu/nn/conv.cc); the op case
// for it (conv2d_more_chunks_than_weight_slots, nn_cases_conv.cc) checks gradients shrunk to one chunk. At full
// size (10 images of 33x33: 1089 output columns each, so one image per chunk of about 1024 columns) its 10
// chunks share the slots: the weight and bias gradients by finite
// differences there (the input's 21780 elements would each cost two forwards, and its gradient has no slots).
TEST(Conv2d, WeightGradientOverMoreChunksThanSlotsMatchesFiniteDifferences) {
  Conv2dOptions o;
  o.pad_h = o.pad_w = 1;
  for (bool channels_last : {false, true}) {
    Generator gen(testing::fresh_seed());
    Tensor x = randn({10, 2, 33, 33}, gen, DType::F64);
    if (channels_last) x = to_channels_last(x);
    Tensor w = randn({3, 2, 3, 3}, gen, DType::F64).set_requires_grad();
    Tensor b = randn({3}, gen, DType::F64).set_requires_grad();
    SCOPED_TRACE(channels_last ? "channels last" : "nchw");
    testing::expect_gradients_match([o](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], o); },
                                    {x, w, b});
  }
}

TEST(Conv2d, ResultsDoNotDependOnThreadCount) {
  Generator gen(testing::fresh_seed());
  Tensor x = randn({12, 8, 30, 30}, gen, DType::F32).set_requires_grad();
  Tensor w = randn({16, 8, 3, 3}, gen, DType::F32).set_requires_grad();
  Conv2dOptions o;
  o.pad_h = o.pad_w = 1;
  auto run = [&](int threads) {
    set_intra_op_threads(threads);
    x.zero_grad();
    w.zero_grad();
    Tensor y = conv2d(x, w, Tensor(), o);
    sum(mul(y, y)).backward();
    return std::vector<Tensor>{y, x.grad(), w.grad()};
  };
  auto one = run(1), two = run(3);
  set_intra_op_threads(0);
  for (int i = 0; i < 3; ++i) testing::expect_bitwise_equal(one[i], two[i], "output " + std::to_string(i));
}

TEST(Conv2d, RejectsMismatchedInputs) {
  Generator gen(testing::fresh_seed());
  Tensor x = randn({2, 4, 8, 8}, gen, DType::F32);
  Tensor w = randn({6, 4, 3, 3}, gen, DType::F32);
  Conv2dOptions o;
  EXPECT_THROW(conv2d(x, randn({6, 3, 3, 3}, gen, DType::F32), Tensor(), o), ShapeError);  // channels
  Conv2dOptions g3 = o;
  g3.groups = 3;
  EXPECT_THROW(conv2d(x, randn({6, 1, 3, 3}, gen, DType::F32), Tensor(), g3), ShapeError);  // groups
  Conv2dOptions g2 = o;
  g2.groups = 2;
  EXPECT_THROW(conv2d(x, w, Tensor(), g2), ShapeError);                                    // weight not per group
  EXPECT_THROW(conv2d(x.flatten(2), w, Tensor(), o), ShapeError);                          // 3-D input
  EXPECT_THROW(conv2d(x, w.flatten(1), Tensor(), o), ShapeError);                          // 2-D weight
  EXPECT_THROW(conv2d(x, w, randn({5}, gen, DType::F32), o), ShapeError);                  // bias size
  EXPECT_THROW(conv2d(randn({1, 4, 2, 2}, gen, DType::F32), w, Tensor(), o), ShapeError);  // too small
  EXPECT_THROW(conv2d(x, w.to(DType::F64), Tensor(), o), DTypeError);
  EXPECT_THROW(conv2d(x.to(DType::I32), w.to(DType::I32), Tensor(), o), DTypeError);
  Conv2dOptions bad = o;
  bad.stride_h = 0;
  EXPECT_THROW(conv2d(x, w, Tensor(), bad), ValueError);
  bad = o;
  bad.pad_w = -1;
  EXPECT_THROW(conv2d(x, w, Tensor(), bad), ValueError);
  try {
    conv2d(x, randn({6, 3, 3, 3}, gen, DType::F32), Tensor(), o);
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 4, 8, 8]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
