// CUDA copy (every dtype pair; contiguous, strided, transposing, broadcast, misaligned) and fill against the
// CPU backend, bit for bit, with guarded outputs.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "runtime/tensor/tensor_desc.h"
#include "tests/kernels/kernel_compare.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {
namespace {

const DType kAllDtypes[] = {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8};

// Source values every dtype involved can hold (the CPU's float-to-integer casts are undefined out of
// range): non-negative below 250 when u8 is involved, else within +-1000, with fractional parts.
Tensor source_values(const Shape& shape, DType src_t, DType dst_t) {
  const bool to_u8 = dst_t == DType::U8 || src_t == DType::U8;
  return random_cpu(shape, src_t, to_u8 ? 0.0 : -1000.0, to_u8 ? 250.0 : 1000.0);
}

// Copies src (any CPU view) into a guarded destination of `shape`, seen through `dst_view` (a function
// turning the contiguous guarded buffer into the destination view), on both backends; expects equal bytes.
void check_copy(const std::string& what, const Tensor& src, DType dst_t, const Shape& shape, int64_t dst_shift,
                bool transpose_dst) {
  const int64_t n = shape_numel(shape);
  auto dst_of = [&](const Guarded& g) {
    if (!transpose_dst) return g.view(shape);
    Shape flipped = shape;
    std::swap(flipped[0], flipped[1]);
    return g.view(flipped).transpose(0, 1);
  };
  const StridedDesc sd = broadcast_desc(src, shape);
  Guarded want(dst_t, n, Device::cpu(), dst_shift), got(dst_t, n, Device::cuda(0), dst_shift);
  Tensor want_view = dst_of(want), got_view = dst_of(got);
  cpu_backend().copy({src.dtype(), src.raw_data(), sd, dst_t, want_view.raw_data(), desc_of(want_view)}, Stream());
  Tensor holder;
  const void* src_dev = gpu_mirror(src, holder);
  gpu_backend().copy({src.dtype(), src_dev, sd, dst_t, got_view.raw_data(), desc_of(got_view)}, gpu_stream());
  expect_bitwise_equal(to_host(got.middle()), want.middle(), what);
  got.expect_intact(what);
}

std::string pair_name(DType s, DType d) { return std::string(dtype_name(s)) + "->" + dtype_name(d); }

TEST(CudaCopy, EveryDtypePairContiguousMatchesCpuBitwise) {
  TD_REQUIRE_GPU();
  for (DType s : kAllDtypes)
    for (DType d : kAllDtypes)
      for (int64_t n : {int64_t{1}, int64_t{7}, int64_t{4096}, int64_t{100003}})
        for (int64_t shift : {0, 1}) {
          Tensor src = source_values({n + shift}, s, d).narrow(0, shift, n);
          check_copy(pair_name(s, d) + " contiguous n=" + std::to_string(n) + " shift=" + std::to_string(shift), src, d,
                     {n}, shift == 0 ? 0 : 2, false);
        }
}

TEST(CudaCopy, EveryDtypePairStridedMatchesCpuBitwise) {
  TD_REQUIRE_GPU();
  for (DType s : kAllDtypes)
    for (DType d : kAllDtypes) {
      const std::string name = pair_name(s, d);
      check_copy(name + " transposed source", source_values({45, 70}, s, d).t(), d, {70, 45}, 0, false);
      check_copy(name + " transposed destination", source_values({33, 20}, s, d), d, {33, 20}, 1, true);
      check_copy(name + " broadcast source", source_values({1, 50}, s, d), d, {30, 50}, 0, false);
      check_copy(name + " sliced source", source_values({20, 30}, s, d).narrow(1, 3, 17), d, {20, 17}, 0, false);
    }
}

TEST(CudaCopy, TransposingCopiesMatchCpuBitwise) {
  TD_REQUIRE_GPU();
  // The tiled path: src contiguous along a dim other than the last; sizes off the 32-element tiles.
  for (DType t : {DType::U8, DType::F16, DType::F32, DType::F64}) {
    const std::string name = dtype_name(t);
    check_copy(name + " 2-D", random_cpu({257, 129}, t, 0, 100).t(), t, {129, 257}, 0, false);
    check_copy(name + " NCHW to NHWC", random_cpu({2, 19, 20, 17}, t, 0, 100).permute({0, 2, 3, 1}), t, {2, 20, 17, 19},
               0, false);
    check_copy(name + " NHWC to NCHW", random_cpu({3, 9, 7, 40}, t, 0, 100).permute({0, 3, 1, 2}), t, {3, 40, 9, 7}, 1,
               false);
    check_copy(name + " batched", random_cpu({5, 64, 48}, t, 0, 100).transpose(1, 2), t, {5, 48, 64}, 0, false);
    // Extents and strides that are multiples of the 4-element vectors: vector loads and stores, partial
    // tiles; then the destination off vector alignment (vector loads, element stores), and the source.
    check_copy(name + " 2-D vectors", random_cpu({196, 136}, t, 0, 100).t(), t, {136, 196}, 0, false);
    check_copy(name + " NCHW to NHWC vectors", random_cpu({2, 68, 10, 12}, t, 0, 100).permute({0, 2, 3, 1}), t,
               {2, 10, 12, 68}, 0, false);
    check_copy(name + " NHWC to NCHW vectors", random_cpu({3, 8, 9, 32}, t, 0, 100).permute({0, 3, 1, 2}), t,
               {3, 32, 8, 9}, 0, false);
    check_copy(name + " 2-D misaligned destination", random_cpu({72, 80}, t, 0, 100).t(), t, {80, 72}, 1, false);
    check_copy(name + " 2-D misaligned source",
               random_cpu({1, 72 * 80 + 1}, t, 0, 100).narrow(1, 1, 72 * 80).view({72, 80}).t(), t, {80, 72}, 0, false);
  }
}

TEST(CudaCopy, FloatSpecialValuesConvertLikeTheCpu) {
  TD_REQUIRE_GPU();
  const double inf = INFINITY;
  std::vector<double> v = {0.0,  -0.0,         1.0,     -1.0,    65504.0, 65519.0, 65520.0, 1e6,     -1e6,
                           1e-8, -1e-8,        5.96e-8, 2.98e-8, 1e-40,   3.4e38,  1e300,   -1e300,  inf,
                           -inf, std::nan(""), 0.1,     1.0 / 3, 2.0 / 3, 1e-30,   6.1e-5,  6.09e-5, -2.5e-39};
  const DType floats[] = {DType::F32, DType::F64, DType::F16, DType::BF16};
  for (DType s : floats)
    for (DType d : floats) {
      Tensor src = from_vector(v, {static_cast<int64_t>(v.size())}).to(s);
      check_copy(pair_name(s, d) + " special values", src, d, {static_cast<int64_t>(v.size())}, 0, false);
    }
}

TEST(CudaFill, EveryDtypeContiguousAndStridedMatchesCpuBitwise) {
  TD_REQUIRE_GPU();
  for (DType t : kAllDtypes)
    for (double value : {0.0, 3.0, -2.75, 200.0})
      for (int64_t n : {int64_t{1}, int64_t{15}, int64_t{1000}, int64_t{65537}})
        for (int64_t shift : {0, 1, 3}) {
          if (t == DType::U8 && value < 0) continue;  // undefined on the CPU
          const std::string what = std::string("fill ") + dtype_name(t) + " " + std::to_string(value) +
                                   " n=" + std::to_string(n) + " shift=" + std::to_string(shift);
          Guarded want(t, n, Device::cpu(), shift), got(t, n, Device::cuda(0), shift);
          // Contiguous, then every other element of the same buffer.
          cpu_backend().fill({t, want.data(), desc_of(want.middle()), value}, Stream());
          gpu_backend().fill({t, got.data(), desc_of(got.middle()), value}, gpu_stream());
          expect_bitwise_equal(to_host(got.middle()), want.middle(), what);
          got.expect_intact(what);
          Tensor want_strided = want.middle().slice(0, 0, n, 2), got_strided = got.middle().slice(0, 0, n, 2);
          cpu_backend().fill({t, want_strided.raw_data(), desc_of(want_strided), value + 1}, Stream());
          gpu_backend().fill({t, got_strided.raw_data(), desc_of(got_strided), value + 1}, gpu_stream());
          expect_bitwise_equal(to_host(got.middle()), want.middle(), what + " strided");
          got.expect_intact(what + " strided");
        }
}

}  // namespace
}  // namespace testing
}  // namespace tandem
