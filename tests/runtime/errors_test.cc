// Misuse gives a typed exception with a message that names the problem, never a crash: shapes, devices,
// dtypes, non-viewable strides, indices out of range, bad dims, item(), undefined tensors, bad values.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/tensor/backend.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using testing::error_of;

TEST(Errors, ShapeMismatchNamesBothShapes) {
  Tensor a = zeros({2, 3}), b = zeros({4});
  std::string msg = error_of<ShapeError>([&] { add(a, b); });
  EXPECT_MENTIONS(msg, "[2, 3]");
  EXPECT_MENTIONS(msg, "[4]");
  EXPECT_MENTIONS(msg, "add");
  bool thrown = false;
  try {
    mul(a, b);
  } catch (const ShapeError& e) {
    thrown = true;
    EXPECT_MENTIONS(e.message(), "mul");
    EXPECT_FALSE(e.expression().empty());
    EXPECT_MENTIONS(std::string(e.file()), ".cc");
    EXPECT_GT(e.line(), 0);
    EXPECT_MENTIONS(std::string(e.what()), e.message());
  }
  EXPECT_TRUE(thrown) << "mul of [2, 3] and [4] threw no ShapeError";
}

TEST(Errors, ShapeErrorsOfOtherOps) {
  Tensor m23 = zeros({2, 3}), m45 = zeros({4, 5});
  std::string msg = error_of<ShapeError>([&] { matmul(m23, m45); });
  EXPECT_MENTIONS(msg, "[2, 3]");
  EXPECT_MENTIONS(msg, "[4, 5]");
  error_of<ShapeError>([&] { matmul(zeros({3}), zeros({3, 2})); });
  error_of<ShapeError>([&] { matmul(zeros({2, 2, 3}), zeros({3, 3, 4})); });
  error_of<ShapeError>([&] { linear(zeros({2, 3}), zeros({4, 5})); });
  error_of<ShapeError>([&] { linear(zeros({2, 5}), zeros({4, 5}), zeros({3})); });
  error_of<ShapeError>([&] { concat({zeros({2, 3}), zeros({2, 3, 1})}, 0); });
  msg = error_of<ShapeError>([&] { concat({zeros({2, 3}), zeros({3, 4})}, 0); });
  EXPECT_MENTIONS(msg, "[3, 4]");
  error_of<ShapeError>([&] { split(zeros({5}), std::vector<int64_t>{2, 2}, 0); });
  msg = error_of<ShapeError>([&] { zeros({2, 3}).view({4}); });
  EXPECT_MENTIONS(msg, "6");
  error_of<ShapeError>([&] { zeros({2, 3}).view({-1, -1}); });
  error_of<ShapeError>([&] { zeros({2, 3}).expand({2, 4}); });
  error_of<ShapeError>([&] { sum_to(zeros({2, 3}), {4}); });
  error_of<ShapeError>([&] { where(zeros({2}, DType::U8), zeros({3}), zeros({3})); });
  error_of<ShapeError>([&] { gather(zeros({3, 4}), 1, zeros({2, 4}, DType::I64)); });
  error_of<ShapeError>([&] { index_select(zeros({3, 4}), 0, zeros({2, 1}, DType::I64)); });
  error_of<ShapeError>([&] { empty({2, -1}); });
  error_of<ShapeError>([&] { empty({1, 1, 1, 1, 1, 1, 1, 1, 1}); });
  error_of<ShapeError>([&] { from_vector<float>({1, 2, 3}, {2, 2}); });
  error_of<ShapeError>([&] { zeros({2}).copy_(zeros({3})); });
}

TEST(Errors, DeviceStringsAreParsedStrictly) {
  EXPECT_EQ(Device::parse("cpu"), Device::cpu());
  EXPECT_EQ(Device::parse("cuda"), Device::cuda(0));
  EXPECT_EQ(Device::parse("cuda:3"), Device::cuda(3));
  EXPECT_EQ(Device::cuda(2).str(), "cuda:2");
  for (const char* bad : {"gpu", "cuda:", "cuda:-1", "cuda:x", "cuda:1x", "CUDA", "", "cpu:0"}) {
    std::string msg = error_of<ValueError>([&] { Device::parse(bad); });
    EXPECT_MENTIONS(msg, "'" + std::string(bad) + "'");
  }
}

TEST(Errors, AskingForAGpuWithoutOneThrowsDeviceError) {
  if (cuda_available()) GTEST_SKIP() << "this machine has a GPU";
  std::string msg = error_of<DeviceError>([] { zeros({2}, Device::cuda(0)); });
  EXPECT_MENTIONS(msg, "no CUDA GPU is available");
  EXPECT_MENTIONS(msg, "cuda:0");
  error_of<DeviceError>([] { zeros({2}).to(Device::cuda(0)); });
  error_of<DeviceError>([] { DeviceGuard g(Device::cuda(0)); });
  error_of<DeviceError>([] { Stream::create(Device::cuda(0)); });
  error_of<DeviceError>([] { backend_for(Device::cuda(0)); });
  EXPECT_EQ(current_device(), Device::cpu());
  EXPECT_EQ(best_device(), Device::cpu());
  EXPECT_FALSE(cuda_unavailable_reason().empty());
}

TEST(Errors, AGpuIndexBeyondTheMachineThrowsDeviceError) {
  TD_REQUIRE_GPU();
  std::string msg = error_of<DeviceError>([] { zeros({2}, Device::cuda(1000)); });
  EXPECT_MENTIONS(msg, "cuda:1000");
  msg = error_of<DeviceError>([] { add(zeros({2}), zeros({2}, Device::cuda(0))); });
  EXPECT_MENTIONS(msg, "different devices");
}

TEST(Errors, DtypeMismatchAndUnsupportedDtypes) {
  std::string msg = error_of<DTypeError>([] { add(zeros({2}, DType::F32), zeros({2}, DType::F64)); });
  EXPECT_MENTIONS(msg, "f32");
  EXPECT_MENTIONS(msg, "f64");
  error_of<DTypeError>([] { matmul(zeros({2, 2}, DType::F32), zeros({2, 2}, DType::F64)); });
  msg = error_of<DTypeError>([] { exp(zeros({2}, DType::I64)); });
  EXPECT_MENTIONS(msg, "i64");
  error_of<DTypeError>([] { sum(zeros({2}, DType::I32)); });
  error_of<DTypeError>([] { add(zeros({2}, DType::F16), zeros({2}, DType::F16)); });
  error_of<DTypeError>([] { index_select(zeros({3}), 0, zeros({1}, DType::I32)); });
  error_of<DTypeError>([] { where(zeros({2}), zeros({2}), zeros({2})); });
  error_of<DTypeError>([] { one_hot(zeros({2}), 3); });
  error_of<DTypeError>([] { zeros({2}, DType::F64).data<float>(); });
  error_of<ValueError>([] { parse_dtype("f8"); });
  EXPECT_EQ(parse_dtype("bf16"), DType::BF16);
}

TEST(Errors, ViewOnNonViewableStridesSuggestsReshape) {
  Tensor t = zeros({2, 3}).t();
  std::string msg = error_of<ShapeError>([&] { t.view({6}); });
  EXPECT_MENTIONS(msg, "reshape");
  EXPECT_MENTIONS(msg, "[3, 2]");
  EXPECT_EQ(t.reshape({6}).shape(), Shape{6});
}

TEST(Errors, IndicesOutOfRangeNameTheIndex) {
  Tensor x = zeros({3, 2});
  std::string msg = error_of<IndexError>([&] { index_select(x, 0, from_vector<int64_t>({0, 5}, {2})); });
  EXPECT_MENTIONS(msg, "index_select");
  EXPECT_MENTIONS(msg, "5");
  msg = error_of<IndexError>([&] { index_select(x, 1, from_vector<int64_t>({-1}, {1})); });
  EXPECT_MENTIONS(msg, "-1");
  msg = error_of<IndexError>([&] { gather(zeros({2, 4}), 1, from_vector<int64_t>({0, 4, 1, 2}, {2, 2})); });
  EXPECT_MENTIONS(msg, "gather");
  EXPECT_MENTIONS(msg, "index 4");
  msg = error_of<IndexError>([&] { one_hot(from_vector<int64_t>({1, 7}, {2}), 5); });
  EXPECT_MENTIONS(msg, "label 7");
  error_of<IndexError>([&] { one_hot(from_vector<int64_t>({-2}, {1}), 5); });
  // The backward scatter of a valid gather works; the tensors survive the errors.
  Tensor w = ones({2, 4}, DType::F64).set_requires_grad();
  sum(gather(w, 1, from_vector<int64_t>({3, 3, 0, 1}, {2, 2}))).backward();
  EXPECT_EQ(w.grad().to_vector<double>(), (std::vector<double>{0, 0, 0, 2, 1, 1, 0, 0}));
}

TEST(Errors, BadDims) {
  Tensor x = zeros({2, 3});
  std::string msg = error_of<IndexError>([&] { sum(x, {3}); });
  EXPECT_MENTIONS(msg, "dim 3");
  error_of<IndexError>([&] { sum(x, {-3}); });
  error_of<ShapeError>([&] { sum(x, {1, -1}); });
  error_of<IndexError>([&] { softmax(x, 2); });
  error_of<IndexError>([&] { max(x, 5); });
  error_of<IndexError>([&] { x.transpose(0, 5); });
  error_of<ShapeError>([&] { x.permute({0, 0}); });
  error_of<ShapeError>([&] { x.permute({0}); });
  error_of<ShapeError>([&] { x.squeeze(0); });
  error_of<IndexError>([&] { x.select(0, 2); });
  error_of<IndexError>([&] { x.narrow(1, 2, 2); });
  error_of<IndexError>([&] { x.slice(1, 0, 3, 0); });
  error_of<IndexError>([&] { x.unsqueeze(4); });
  error_of<ShapeError>([&] { x.flatten(1, 0); });
  error_of<ShapeError>([&] { zeros({2, 2, 2}).t(); });
  error_of<IndexError>([&] { concat({x, x}, 2); });
  error_of<IndexError>([&] { x.size(2); });
}

TEST(Errors, ZeroDimTensorsHaveNoDimToIndex) {
  Tensor s = scalar_tensor(2.0, DType::F64);
  Tensor i0 = from_vector<int64_t>({0}, {}), i1 = from_vector<int64_t>({0}, {1});
  std::string msg = error_of<IndexError>([&] { s.size(0); });
  EXPECT_MENTIONS(msg, "0 dims");
  error_of<IndexError>([&] { s.stride(-1); });
  error_of<IndexError>([&] { index_select(s, 0, i1); });
  error_of<IndexError>([&] { gather(s, 0, i0); });
  error_of<IndexError>([&] { concat({s, s}, 0); });
  error_of<IndexError>([&] { split(s, int64_t{1}, 0); });
  error_of<IndexError>([&] { chunk(s, 2, 0); });
  error_of<IndexError>([&] { s.narrow(0, 0, 1); });
  error_of<IndexError>([&] { s.slice(0, 0, 1); });
  error_of<IndexError>([&] { s.select(0, 0); });
  error_of<IndexError>([&] { s.squeeze(0); });
  error_of<IndexError>([&] { s.transpose(0, -1); });
  error_of<IndexError>([&] { max(s, 0); });
  error_of<IndexError>([&] { argmax(s, -1); });
  // What a 0-dim tensor does support.
  EXPECT_EQ(s.unsqueeze(0).shape(), Shape{1});
  EXPECT_EQ(s.flatten().shape(), Shape{1});
  EXPECT_EQ(softmax(s, -1).item<double>(), 1.0);
}

TEST(Errors, ItemNeedsExactlyOneElement) {
  std::string msg = error_of<ShapeError>([] { zeros({2, 2}).item<float>(); });
  EXPECT_MENTIONS(msg, "[2, 2]");
  error_of<ShapeError>([] { zeros({0}).item<float>(); });
  EXPECT_EQ(full({1, 1}, 2.5).item<float>(), 2.5f);
  EXPECT_EQ(scalar_tensor(7, DType::I64).item<int64_t>(), 7);
}

TEST(Errors, UndefinedTensors) {
  Tensor u;
  EXPECT_FALSE(u.defined());
  std::string msg = error_of<ValueError>([&] { u.shape(); });
  EXPECT_MENTIONS(msg, "undefined");
  error_of<ValueError>([&] { u.numel(); });
  error_of<ValueError>([&] { add(u, zeros({1})); });
  error_of<ValueError>([&] { zeros({1}).copy_(u); });
  error_of<ValueError>([&] { u.fill_(1.0); });
  error_of<ValueError>([&] { u.backward(); });
  error_of<ValueError>([&] { concat({}, 0); });
  EXPECT_EQ(u.str(), "Tensor(undefined)");
}

TEST(Errors, BadValues) {
  Tensor x = zeros({4});
  std::string msg = error_of<ValueError>([&] { clamp(x, 1.0, 0.0); });
  EXPECT_MENTIONS(msg, "clamp");
  error_of<ValueError>([&] { div(x, 0.0); });
  error_of<ValueError>([&] { arange(-1); });
  error_of<ShapeError>([&] { chunk(x, 0, 0); });
  error_of<ShapeError>([&] { split(x, int64_t{0}, 0); });
  error_of<ValueError>([&] { one_hot(zeros({2}, DType::I64), 0); });
}

TEST(Errors, EveryErrorIsATandemErrorAndARuntimeError) {
  try {
    add(zeros({2}), zeros({3}));
    FAIL() << "nothing thrown";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(dynamic_cast<const Error*>(&e), nullptr);
  }
}

}  // namespace
}  // namespace tandem
