// conv2d on the CPU: forward against a direct-loop f64 reference, finite-difference gradients, memory
// formats, thread-count independence and error paths.
#include <gtest/gtest.h>

#include "runtime/tensor/autograd.h"
#include "runtime/base/error.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "runtime/base/parallel_for.h"
#include "tests/nn/nn_test_util.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using testing::random_input;
using testing::values;

struct ConvCase {
  int64_t n, c, h, w, o, kh, kw;
  Conv2dOptions opt;
  bool bias;
};

Conv2dOptions options(int64_t sh, int64_t sw, int64_t ph, int64_t pw, int64_t dh, int64_t dw, int64_t groups) {
  Conv2dOptions o;
  o.stride_h = sh;
  o.stride_w = sw;
  o.pad_h = ph;
  o.pad_w = pw;
  o.dilation_h = dh;
  o.dilation_w = dw;
  o.groups = groups;
  return o;
}

// Small shapes covering every option and every CPU path (GEMM, chunked GEMM, pointwise, direct).
std::vector<ConvCase> cases() {
  return {
      {2, 3, 7, 6, 4, 3, 3, options(1, 1, 1, 1, 1, 1, 1), true},    // 3x3, padding
      {2, 4, 9, 8, 6, 3, 2, options(2, 1, 0, 1, 1, 1, 1), false},   // stride, rectangular kernel
      {1, 2, 9, 9, 3, 3, 3, options(1, 1, 2, 2, 2, 2, 1), true},    // dilation
      {2, 4, 6, 5, 6, 3, 3, options(1, 2, 1, 0, 1, 1, 2), true},    // groups
      {2, 4, 7, 7, 4, 3, 3, options(2, 2, 1, 1, 1, 1, 4), true},    // depthwise
      {2, 3, 6, 6, 6, 3, 3, options(1, 1, 1, 1, 2, 1, 3), false},   // depthwise, multiplier 2, dilation
      {2, 1, 8, 7, 5, 3, 3, options(1, 1, 1, 1, 1, 1, 1), true},    // a single input channel
      {3, 8, 5, 5, 6, 1, 1, options(1, 1, 0, 0, 1, 1, 1), true},    // pointwise, images batched
      {1, 3, 33, 32, 2, 1, 1, options(1, 1, 0, 0, 1, 1, 1), false}, // pointwise, one image per GEMM
      {10, 2, 33, 33, 3, 3, 3, options(1, 1, 1, 1, 1, 1, 1), true}, // more chunks than weight slots
  };
}

// Direct f64 convolution of row-major x [n, c, h, w] and w [o, c/g, kh, kw].
std::vector<double> reference_conv(const ConvCase& k, const std::vector<double>& x, const std::vector<double>& w,
                                   const std::vector<double>& b, int64_t& oh, int64_t& ow) {
  const Conv2dOptions& o = k.opt;
  oh = (k.h + 2 * o.pad_h - o.dilation_h * (k.kh - 1) - 1) / o.stride_h + 1;
  ow = (k.w + 2 * o.pad_w - o.dilation_w * (k.kw - 1) - 1) / o.stride_w + 1;
  int64_t cg = k.c / o.groups, og = k.o / o.groups;
  std::vector<double> y(k.n * k.o * oh * ow, 0.0);
  for (int64_t n = 0; n < k.n; ++n)
    for (int64_t oc = 0; oc < k.o; ++oc)
      for (int64_t i = 0; i < oh; ++i)
        for (int64_t j = 0; j < ow; ++j) {
          double s = b.empty() ? 0.0 : b[oc];
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t a = 0; a < k.kh; ++a)
              for (int64_t bb = 0; bb < k.kw; ++bb) {
                int64_t ih = i * o.stride_h - o.pad_h + a * o.dilation_h;
                int64_t iw = j * o.stride_w - o.pad_w + bb * o.dilation_w;
                if (ih < 0 || ih >= k.h || iw < 0 || iw >= k.w) continue;
                int64_t c = (oc / og) * cg + ci;
                s += x[((n * k.c + c) * k.h + ih) * k.w + iw] * w[((oc * cg + ci) * k.kh + a) * k.kw + bb];
              }
          y[((n * k.o + oc) * oh + i) * ow + j] = s;
        }
  return y;
}

void check_forward(DType dtype, bool channels_last, double tol) {
  for (const ConvCase& k : cases()) {
    Generator gen(testing::fresh_seed());
    Tensor x = random_input({k.n, k.c, k.h, k.w}, gen, dtype);
    Tensor w = random_input({k.o, k.c / k.opt.groups, k.kh, k.kw}, gen, dtype);
    Tensor b = k.bias ? random_input({k.o}, gen, dtype) : Tensor();
    int64_t oh, ow;
    std::vector<double> ref = reference_conv(k, values(x), values(w), k.bias ? values(b) : std::vector<double>{}, oh, ow);
    Tensor xin = channels_last ? to_channels_last(x) : x;
    Tensor y = conv2d(xin, w, b, k.opt);
    ASSERT_EQ(y.shape(), (Shape{k.n, k.o, oh, ow}));
    EXPECT_EQ(is_channels_last(y), channels_last);
    testing::expect_close(y, from_vector(ref, y.shape()), tol,
                          "conv2d n" + std::to_string(k.n) + " c" + std::to_string(k.c) + " o" + std::to_string(k.o) +
                              " groups " + std::to_string(k.opt.groups));
  }
}

TEST(Conv2d, ForwardMatchesReferenceF64) { check_forward(DType::F64, false, 1e-12); }
TEST(Conv2d, ForwardMatchesReferenceF32) { check_forward(DType::F32, false, 1e-4); }
TEST(Conv2d, ForwardChannelsLastMatchesReference) { check_forward(DType::F64, true, 1e-12); }

// Gradient checks on shrunken versions of the cases (finite differences cost two forwards per element).
void check_gradients(bool channels_last) {
  for (ConvCase k : cases()) {
    k.n = std::min<int64_t>(k.n, 2);
    k.h = std::min<int64_t>(k.h, 9);
    k.w = std::min<int64_t>(k.w, 8);
    Generator gen(testing::fresh_seed());
    Tensor x = random_input({k.n, k.c, k.h, k.w}, gen);
    if (channels_last) x = to_channels_last(x);
    x.set_requires_grad();
    Tensor w = random_input({k.o, k.c / k.opt.groups, k.kh, k.kw}, gen).set_requires_grad();
    Tensor b = k.bias ? random_input({k.o}, gen).set_requires_grad() : Tensor();
    Conv2dOptions o = k.opt;
    SCOPED_TRACE("groups " + std::to_string(o.groups) + " c " + std::to_string(k.c) + " o " + std::to_string(k.o));
    testing::expect_gradients_match([o](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], o); },
                                    {x, w, b});
  }
}

// The weight gradient sums its chunks' partial GEMMs in at most 8 slots (kernels/cpu/nn/conv.cc); the case
// for it, shrunk above, runs one chunk. At full size (10 images of 33x33: 1089 output columns each, so one image
// per chunk of about 1024 columns) its 10 chunks share the slots: the weight and bias gradients by finite
// differences there (the input's 21780 elements would each cost two forwards, and its gradient has no slots).
TEST(Conv2d, WeightGradientOverMoreChunksThanSlotsMatchesFiniteDifferences) {
  const ConvCase k = cases().back();
  ASSERT_EQ(k.n, 10);
  for (bool channels_last : {false, true}) {
    Generator gen(testing::fresh_seed());
    Tensor x = random_input({k.n, k.c, k.h, k.w}, gen);
    if (channels_last) x = to_channels_last(x);
    Tensor w = random_input({k.o, k.c / k.opt.groups, k.kh, k.kw}, gen).set_requires_grad();
    Tensor b = random_input({k.o}, gen).set_requires_grad();
    Conv2dOptions o = k.opt;
    SCOPED_TRACE(channels_last ? "channels last" : "nchw");
    testing::expect_gradients_match([o](const std::vector<Tensor>& in) { return conv2d(in[0], in[1], in[2], o); },
                                    {x, w, b});
  }
}

TEST(Conv2d, GradientsMatchFiniteDifferences) { check_gradients(false); }
TEST(Conv2d, GradientsMatchFiniteDifferencesChannelsLast) { check_gradients(true); }

TEST(Conv2d, ResultsDoNotDependOnThreadCount) {
  Generator gen(testing::fresh_seed());
  Tensor x = random_input({12, 8, 30, 30}, gen, DType::F32).set_requires_grad();
  Tensor w = random_input({16, 8, 3, 3}, gen, DType::F32).set_requires_grad();
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
  Tensor x = random_input({2, 4, 8, 8}, gen, DType::F32);
  Tensor w = random_input({6, 4, 3, 3}, gen, DType::F32);
  Conv2dOptions o;
  EXPECT_THROW(conv2d(x, random_input({6, 3, 3, 3}, gen, DType::F32), Tensor(), o), ShapeError);  // channels
  Conv2dOptions g3 = o;
  g3.groups = 3;
  EXPECT_THROW(conv2d(x, random_input({6, 1, 3, 3}, gen, DType::F32), Tensor(), g3), ShapeError);  // groups
  Conv2dOptions g2 = o;
  g2.groups = 2;
  EXPECT_THROW(conv2d(x, w, Tensor(), g2), ShapeError);                           // weight not per group
  EXPECT_THROW(conv2d(x.flatten(2), w, Tensor(), o), ShapeError);                 // 3-D input
  EXPECT_THROW(conv2d(x, w.flatten(1), Tensor(), o), ShapeError);                 // 2-D weight
  EXPECT_THROW(conv2d(x, w, random_input({5}, gen, DType::F32), o), ShapeError);  // bias size
  EXPECT_THROW(conv2d(random_input({1, 4, 2, 2}, gen, DType::F32), w, Tensor(), o), ShapeError);  // too small
  EXPECT_THROW(conv2d(x, w.to(DType::F64), Tensor(), o), DTypeError);
  EXPECT_THROW(conv2d(x.to(DType::I32), w.to(DType::I32), Tensor(), o), DTypeError);
  Conv2dOptions bad = o;
  bad.stride_h = 0;
  EXPECT_THROW(conv2d(x, w, Tensor(), bad), ValueError);
  bad = o;
  bad.pad_w = -1;
  EXPECT_THROW(conv2d(x, w, Tensor(), bad), ValueError);
  try {
    conv2d(x, random_input({6, 3, 3, 3}, gen, DType::F32), Tensor(), o);
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("[2, 4, 8, 8]"), std::string::npos) << e.what();
  }
}

}  // namespace
}  // namespace tandem
