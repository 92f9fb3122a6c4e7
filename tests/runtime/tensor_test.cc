// Tensor basics: views sharing storage and version counters, view metadata, contiguous/clone, factories,
// from_vector/to_vector for every dtype, conversions between dtypes, printing, zero-sized tensors, rebinding
// to another storage.
#include <gtest/gtest.h>

#include <cstdint>
#include <sstream>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using tandem::testing::expect_close;

Tensor iota(const Shape& shape, DType t = DType::F32) { return arange(shape_numel(shape), t).view(shape); }

TEST(TensorBasics, ViewsShareStorageAndTheVersionCounter) {
  Tensor x = iota({2, 3, 4});
  std::vector<Tensor> views = {x.permute({2, 0, 1}), x.slice(1, 0, 3, 2), x.view({6, 4}),
                               x.select(0, 1),       x.unsqueeze(0),      x.flatten(),
                               x.transpose(0, 1),    x.detach(),          x.narrow(2, 1, 2)};
  uint64_t v0 = x.version();
  for (const Tensor& v : views) {
    EXPECT_TRUE(v.storage().same(x.storage()));
    EXPECT_EQ(v.version(), v0);
  }
  views[1].fill_(-1.0);  // x[:, 0::2, :]
  for (const Tensor& v : views) EXPECT_EQ(v.version(), v0 + 1);
  std::vector<float> got = x.to_vector<float>();
  for (int i = 0; i < 24; ++i) {
    int j = (i / 4) % 3;
    EXPECT_EQ(got[i], j % 2 == 0 ? -1.0f : static_cast<float>(i)) << i;
  }
  // Writing through a view is seen by the base.
  x.select(2, 3).copy_(full({2, 3}, 7.0));
  EXPECT_EQ(x.to_vector<float>()[23], 7.0f);
  EXPECT_EQ(x.version(), v0 + 2);
}

TEST(TensorBasics, ViewMetadata) {
  Tensor x = iota({2, 3, 4});
  EXPECT_EQ(x.strides(), (Shape{12, 4, 1}));
  EXPECT_TRUE(x.is_contiguous());
  EXPECT_EQ(x.dim(), 3);
  EXPECT_EQ(x.numel(), 24);
  EXPECT_EQ(x.size(-1), 4);
  EXPECT_EQ(x.stride(-2), 4);
  EXPECT_EQ(x.nbytes(), 96u);
  Tensor p = x.permute({2, 0, 1});
  EXPECT_EQ(p.shape(), (Shape{4, 2, 3}));
  EXPECT_EQ(p.strides(), (Shape{1, 12, 4}));
  EXPECT_FALSE(p.is_contiguous());
  Tensor s = x.slice(1, 1, 3);
  EXPECT_EQ(s.storage_offset(), 4);
  EXPECT_EQ(s.shape(), (Shape{2, 2, 4}));
  Tensor stepped = x.slice(2, 1, 4, 2);
  EXPECT_EQ(stepped.shape(), (Shape{2, 3, 2}));
  EXPECT_EQ(stepped.strides(), (Shape{12, 4, 2}));
  EXPECT_EQ(stepped.storage_offset(), 1);
  Tensor sel = x.select(2, 1);
  EXPECT_EQ(sel.shape(), (Shape{2, 3}));
  EXPECT_EQ(sel.strides(), (Shape{12, 4}));
  EXPECT_EQ(sel.storage_offset(), 1);
  Tensor e = iota({3, 1}).expand({2, 3, 4});
  EXPECT_EQ(e.strides(), (Shape{0, 1, 0}));
  EXPECT_EQ(e.to_vector<float>()[23], 2.0f);
  Tensor u = x.unsqueeze(1);
  EXPECT_EQ(u.shape(), (Shape{2, 1, 3, 4}));
  EXPECT_TRUE(u.is_contiguous());
}

TEST(TensorBasics, ContiguousOfAPermutedTensorCopiesInRowMajorOrder) {
  Tensor x = iota({2, 3, 4});
  Tensor p = x.permute({1, 2, 0});
  Tensor c = p.contiguous();
  EXPECT_TRUE(c.is_contiguous());
  EXPECT_FALSE(c.storage().same(x.storage()));
  EXPECT_EQ(c.strides(), (Shape{8, 2, 1}));
  std::vector<float> got = c.to_vector<float>();
  for (int j = 0; j < 3; ++j)
    for (int k = 0; k < 4; ++k)
      for (int i = 0; i < 2; ++i) EXPECT_EQ(got[(j * 4 + k) * 2 + i], static_cast<float>(i * 12 + j * 4 + k));
  EXPECT_TRUE(x.contiguous().same(x));  // already contiguous: itself
}

TEST(TensorBasics, CloneIsADeepCopy) {
  Tensor x = iota({3, 2});
  Tensor c = x.clone();
  EXPECT_FALSE(c.storage().same(x.storage()));
  c.fill_(5.0);
  EXPECT_EQ(x.to_vector<float>(), (std::vector<float>{0, 1, 2, 3, 4, 5}));
  // A dense source's layout is kept (PyTorch's preserve_format); others' clones are contiguous.
  Tensor t = x.t().clone();
  EXPECT_EQ(t.strides(), x.t().strides());
  EXPECT_FALSE(t.storage().same(x.storage()));
  EXPECT_EQ(t.to_vector<float>(), (std::vector<float>{0, 2, 4, 1, 3, 5}));
  Tensor s = x.slice(0, 0, 3, 2).clone();
  EXPECT_TRUE(s.is_contiguous());
  EXPECT_EQ(s.to_vector<float>(), (std::vector<float>{0, 1, 4, 5}));
}

template <typename T>
void expect_round_trip(const std::vector<T>& values, DType dtype) {
  Tensor t = from_vector<T>(values, {static_cast<int64_t>(values.size())});
  EXPECT_EQ(t.dtype(), dtype);
  EXPECT_EQ(t.device(), Device::cpu());
  EXPECT_EQ(t.to_vector<T>(), values) << dtype_name(dtype);
}

TEST(TensorBasics, FromVectorAndToVectorForEveryDtype) {
  expect_round_trip<float>({1.5f, -2.25f, 3e-38f, 65504.f}, DType::F32);
  expect_round_trip<double>({1e-300, -2.5, 1e300, 0.1}, DType::F64);
  expect_round_trip<int32_t>({-2147483647 - 1, -1, 0, 2147483647}, DType::I32);
  expect_round_trip<int64_t>({INT64_MIN, -1, 0, INT64_MAX}, DType::I64);
  expect_round_trip<uint8_t>({0, 1, 128, 255}, DType::U8);
  // Storage-only dtypes through a conversion.
  for (DType half : {DType::F16, DType::BF16}) {
    Tensor h = from_vector<float>({1.0f, -0.5f, 256.0f, 0.0f}, {4}).to(half);
    EXPECT_EQ(h.dtype(), half);
    EXPECT_EQ(h.to_vector<float>(), (std::vector<float>{1.0f, -0.5f, 256.0f, 0.0f})) << dtype_name(half);
    EXPECT_EQ(h.to_vector<int64_t>(), (std::vector<int64_t>{1, 0, 256, 0})) << dtype_name(half);
  }
  // to_vector converts.
  Tensor i = from_vector<int64_t>({-3, 0, 7}, {3});
  EXPECT_EQ(i.to_vector<double>(), (std::vector<double>{-3, 0, 7}));
  Tensor f = from_vector<double>({2.75, -1.75, 300.0}, {3});
  EXPECT_EQ(f.to_vector<int32_t>(), (std::vector<int32_t>{2, -1, 300}));  // C++ conversion: toward zero
  EXPECT_EQ(from_vector<float>({}, {0}).to_vector<float>().size(), 0u);
  EXPECT_EQ(from_vector<float>({4.0f}, {}).dim(), 0);
}

TEST(TensorBasics, Factories) {
  Tensor z = zeros({2, 3});
  EXPECT_EQ(z.dtype(), DType::F32);
  EXPECT_EQ(z.device(), Device::cpu());
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(ones({4}, DType::I32).to_vector<int32_t>(), std::vector<int32_t>(4, 1));
  EXPECT_EQ(full({2, 2}, -1.5, DType::F64).to_vector<double>(), std::vector<double>(4, -1.5));
  EXPECT_EQ(arange(5, DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{0, 1, 2, 3, 4}));
  EXPECT_EQ(arange(0).numel(), 0);
  Tensor s = scalar_tensor(3.5, DType::F64);
  EXPECT_EQ(s.dim(), 0);
  EXPECT_EQ(s.numel(), 1);
  EXPECT_EQ(s.item<double>(), 3.5);
  Tensor e = empty({3, 0, 2});
  EXPECT_EQ(e.numel(), 0);
  Tensor base = full({2, 3}, 2.0, DType::U8);
  EXPECT_EQ(zeros_like(base).dtype(), DType::U8);
  EXPECT_EQ(ones_like(base).to_vector<uint8_t>(), std::vector<uint8_t>(6, 1));
  EXPECT_EQ(full_like(base, 9).to_vector<uint8_t>(), std::vector<uint8_t>(6, 9));
  EXPECT_EQ(empty_like(base).shape(), base.shape());
  Tensor w = full({2}, 1.0, TensorOptions(DType::F64).with_requires_grad());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
}

TEST(TensorBasics, CopyAndFillAcrossDtypes) {
  Tensor f = from_vector<float>({1.9f, -2.9f, 300.5f, 0.4f}, {4});
  Tensor i = zeros({4}, DType::I32);
  i.copy_(f);
  EXPECT_EQ(i.to_vector<int32_t>(), (std::vector<int32_t>{1, -2, 300, 0}));
  Tensor d = zeros({2, 4}, DType::F64);
  d.copy_(i);  // broadcast over the rows
  EXPECT_EQ(d.to_vector<double>(), (std::vector<double>{1, -2, 300, 0, 1, -2, 300, 0}));
  Tensor l = empty({3}, DType::I64);
  l.fill_(-7);
  EXPECT_EQ(l.to_vector<int64_t>(), (std::vector<int64_t>{-7, -7, -7}));
  EXPECT_TRUE(f.to(DType::F32).same(f));
  EXPECT_TRUE(f.to(Device::cpu()).same(f));
  Tensor z = f.clone();
  z.zero_();
  EXPECT_EQ(z.to_vector<float>(), std::vector<float>(4, 0.0f));
}

TEST(TensorBasics, StrAndPrinting) {
  Tensor x = from_vector<float>({1.0f, 2.5f, -3.0f, 4.0f}, {2, 2});
  std::string s = x.str();
  EXPECT_EQ(s, "Tensor(shape=[2, 2], dtype=f32, device=cpu)\n  1 2.5\n  -3 4");
  std::ostringstream os;
  os << x;
  EXPECT_EQ(os.str(), s);
  Tensor g = from_vector<double>({0.5}, {}).set_requires_grad();
  EXPECT_EQ(g.str(), "Tensor(shape=[], dtype=f64, device=cpu, requires_grad)\n  0.5");
  std::string long_str = arange(100, DType::I64).str(10);
  EXPECT_NE(long_str.find("0 1 2 3 4 5 6 7 8 9 ... (90 more)"), std::string::npos) << long_str;
  EXPECT_EQ(shape_str({}), "[]");
  EXPECT_EQ(shape_str({3, 1, 2}), "[3, 1, 2]");
}

// set_storage_ repoints a tensor (every handle of it) at another storage, as Cyclic DP binds parameters to
// slices of one flat buffer; earlier views keep their memory; a storage too small or an offset before it is
// refused; an empty storage drops the memory.
TEST(TensorBasics, SetStoragePointsEveryHandleAtTheNewMemory) {
  Generator gen(testing::fresh_seed());
  Tensor flat = randn({10}, gen);
  Tensor p = zeros({2, 3});
  Tensor handle = p;  // a copy of the handle, as a module's member and its parameter list hold
  Tensor old_view = p.view({6});
  p.set_storage_(flat.storage(), 4);
  EXPECT_EQ(handle.storage_offset(), 4);
  EXPECT_EQ(handle.to_vector<float>(), flat.narrow(0, 4, 6).to_vector<float>());
  flat.fill_(2.0);  // writes through the buffer are the tensor's
  EXPECT_EQ(handle.to_vector<float>(), std::vector<float>(6, 2.0f));
  EXPECT_EQ(old_view.to_vector<float>(), std::vector<float>(6, 0.0f));  // a view keeps what it had
  EXPECT_EQ(p.version(), flat.version());                               // the buffer's version counter now
  EXPECT_THROW(p.set_storage_(flat.storage(), 5), ValueError);          // elements 5..10 of 10
  EXPECT_THROW(p.set_storage_(flat.storage(), -1), ValueError);
  EXPECT_EQ(handle.storage_offset(), 4);  // a refused call changes nothing
  p.set_storage_(Storage());
  EXPECT_EQ(handle.storage().data(), nullptr);
  EXPECT_EQ(handle.shape(), (Shape{2, 3}));
  p.set_storage_(flat.storage(), 0);
  EXPECT_EQ(handle.to_vector<float>(), std::vector<float>(6, 2.0f));
}

TEST(TensorBasics, ZeroSizedTensorsWork) {
  Tensor e = zeros({0, 3});
  EXPECT_EQ(sum(e, {0}).to_vector<float>(), std::vector<float>(3, 0.0f));
  EXPECT_EQ(add(e, ones({3})).shape(), (Shape{0, 3}));
  EXPECT_EQ(matmul(zeros({2, 0}), zeros({0, 3})).to_vector<float>(), std::vector<float>(6, 0.0f));
  EXPECT_EQ(concat({e, ones({2, 3})}, 0).shape(), (Shape{2, 3}));
  EXPECT_TRUE(e.to_vector<float>().empty());
  EXPECT_EQ(e.reshape({3, 0}).shape(), (Shape{3, 0}));
}

TEST(TensorBasics, ReshapeOfAViewableTensorSharesStorage) {
  Tensor x = iota({4, 6});
  EXPECT_TRUE(x.reshape({2, 12}).storage().same(x.storage()));
  EXPECT_TRUE(x.slice(0, 1, 3).reshape({12}).storage().same(x.storage()));  // rows stay contiguous
  EXPECT_FALSE(x.t().reshape({24}).storage().same(x.storage()));
  expect_close(x.t().reshape({24}), x.t().contiguous().view({24}), 0.0, "reshape copy");
}

}  // namespace
}  // namespace tandem
