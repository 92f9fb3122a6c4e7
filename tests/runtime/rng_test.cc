// The Philox RNG: known answers, reproducibility, Generator::advance's counter ranges, the ranges and
// moments of uniform and normal draws, in-place fills, and CPU == CUDA bit for bit (GPU only).
#include <gtest/gtest.h>

#include <cstring>

#include <algorithm>
#include <cmath>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/philox.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using tandem::testing::expect_bitwise_equal;
using tandem::testing::fresh_seed;

// Mean, standard deviation and third standardized moment of a sample.
struct Moments {
  double mean = 0, std = 0, skew = 0;
};
Moments moments(const std::vector<double>& v) {
  Moments m;
  double n = static_cast<double>(v.size());
  for (double x : v) m.mean += x;
  m.mean /= n;
  double m2 = 0, m3 = 0;
  for (double x : v) {
    double d = x - m.mean;
    m2 += d * d;
    m3 += d * d * d;
  }
  m.std = std::sqrt(m2 / n);
  m.skew = (m3 / n) / (m.std * m.std * m.std);
  return m;
}

TEST(Philox, KnownAnswerOfRandom123) {
  // Philox4x32-10 with counter 0 and key 0, from Random123's published known-answer vectors.
  philox::Block b = philox::generate(0, 0);
  EXPECT_EQ(b.x[0], 0x6627e8d5u);
  EXPECT_EQ(b.x[1], 0xe169c58du);
  EXPECT_EQ(b.x[2], 0xbc57ac4cu);
  EXPECT_EQ(b.x[3], 0x9b00dbd8u);
}

TEST(Philox, ValueIUsesCounterOffsetPlusIOver4AndWordIMod4) {
  uint64_t seed = fresh_seed(), offset = 12345;
  Generator g32(seed, offset), g64(seed, offset);
  std::vector<float> f = rand({11}, g32, DType::F32).to_vector<float>();
  std::vector<double> d = rand({11}, g64, DType::F64).to_vector<double>();
  for (int i = 0; i < 11; ++i) {
    uint32_t w = philox::generate(seed, offset + i / 4).x[i % 4];
    EXPECT_EQ(f[i], static_cast<float>(static_cast<double>(w >> 8) / 16777216.0)) << i;  // 24 bits
    EXPECT_EQ(d[i], static_cast<double>(w) / 4294967296.0) << i;                         // 32 bits
  }
}

// The CPU fills whole counters with sample_block, the CUDA kernel value by value with sample: the same bits,
// normal (each Box-Muller pair computed once) and uniform, f32 and f64, for a mean and a scale off 0 and 1.
template <typename T>
void expect_block_matches_values(uint64_t seed) {
  for (uint64_t counter = 0; counter < 256; ++counter) {
    philox::Block b = philox::generate(seed, counter);
    for (bool normal : {true, false}) {
      T block[4];
      philox::sample_block<T>(b, normal, 0.25, 3.0, block);
      for (int w = 0; w < 4; ++w) {
        const T one = philox::sample<T>(b, w, normal, 0.25, 3.0);
        EXPECT_EQ(std::memcmp(&block[w], &one, sizeof(T)), 0) << counter << " " << normal << " " << w;
      }
    }
  }
}

TEST(Philox, BlockOfFourMatchesValueByValue) {
  const uint64_t seed = fresh_seed();
  expect_block_matches_values<float>(seed);
  expect_block_matches_values<double>(seed);
}

TEST(Rng, SameSeedAndOffsetReproduce) {
  uint64_t seed = fresh_seed();
  for (DType t : {DType::F32, DType::F64}) {
    Generator a(seed, 7), b(seed, 7);
    expect_bitwise_equal(rand({37}, a, t), rand({37}, b, t), "rand");
    expect_bitwise_equal(randn({37}, a, t), randn({37}, b, t), "randn");
    expect_bitwise_equal(uniform({5, 3}, -2, 3, a, t), uniform({5, 3}, -2, 3, b, t), "uniform");
    expect_bitwise_equal(normal({5, 3}, 1, 2, a, t), normal({5, 3}, 1, 2, b, t), "normal");
    EXPECT_EQ(a.offset(), b.offset());
  }
}

TEST(Rng, DifferentSeedsOrOffsetsGiveDifferentStreams) {
  uint64_t seed = fresh_seed();
  Generator a(seed), b(seed + 1), c(seed, 1000);
  std::vector<double> va = rand({256}, a, DType::F64).to_vector<double>();
  std::vector<double> vb = rand({256}, b, DType::F64).to_vector<double>();
  std::vector<double> vc = rand({256}, c, DType::F64).to_vector<double>();
  int same_b = 0, same_c = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    same_b += va[i] == vb[i];
    same_c += va[i] == vc[i];
  }
  EXPECT_LE(same_b, 1);
  EXPECT_LE(same_c, 1);
}

TEST(Rng, AdvanceReservesFourValuesPerCounter) {
  Generator g(fresh_seed(), 10);
  EXPECT_EQ(g.advance(5), 10u);
  EXPECT_EQ(g.offset(), 12u);  // ceil(5 / 4) counters
  EXPECT_EQ(g.advance(8), 12u);
  EXPECT_EQ(g.offset(), 14u);
  EXPECT_EQ(g.advance(1), 14u);
  EXPECT_EQ(g.offset(), 15u);
  EXPECT_EQ(g.advance(0), 15u);
  EXPECT_EQ(g.offset(), 15u);
}

TEST(Rng, ConsecutiveDrawsAreDisjointSlicesOfOneStream) {
  uint64_t seed = fresh_seed();
  for (DType t : {DType::F32, DType::F64}) {
    // n a multiple of 4: rand(n) then rand(m) is exactly rand(n + m).
    Generator split_gen(seed), whole_gen(seed);
    std::vector<double> first = rand({8}, split_gen, t).to_vector<double>();
    std::vector<double> second = rand({6}, split_gen, t).to_vector<double>();
    std::vector<double> whole = rand({14}, whole_gen, t).to_vector<double>();
    EXPECT_EQ(split_gen.offset(), whole_gen.offset());
    for (int i = 0; i < 8; ++i) EXPECT_EQ(first[i], whole[i]) << i;
    for (int i = 0; i < 6; ++i) EXPECT_EQ(second[i], whole[8 + i]) << i;
    // n not a multiple of 4: the second draw starts at the next counter, skipping the rest of the block.
    Generator ragged(seed), reference(seed);
    std::vector<double> a = rand({5}, ragged, t).to_vector<double>();
    std::vector<double> b = rand({6}, ragged, t).to_vector<double>();
    std::vector<double> r = rand({14}, reference, t).to_vector<double>();
    for (int i = 0; i < 5; ++i) EXPECT_EQ(a[i], r[i]) << i;
    for (int i = 0; i < 6; ++i) EXPECT_EQ(b[i], r[8 + i]) << i;
    EXPECT_NE(b[0], r[5]);
    EXPECT_EQ(ragged.offset(), 2u + 2u);
  }
}

TEST(Rng, UniformStaysInItsHalfOpenRange) {
  for (DType t : {DType::F32, DType::F64}) {
    Generator g(fresh_seed());
    std::vector<double> v = uniform({100000}, -3.0, 5.0, g, t).to_vector<double>();
    double lo = *std::min_element(v.begin(), v.end()), hi = *std::max_element(v.begin(), v.end());
    EXPECT_GE(lo, -3.0);
    EXPECT_LT(hi, 5.0);
    EXPECT_LT(lo, -2.99);
    EXPECT_GT(hi, 4.99);
    Moments m = moments(v);
    double sd = 8.0 / std::sqrt(12.0);
    EXPECT_NEAR(m.mean, 1.0, 5 * sd / std::sqrt(1e5)) << dtype_name(t);
    EXPECT_NEAR(m.std, sd, 0.01) << dtype_name(t);
    // Ten equal bins, each within 5 sigma of n / 10.
    std::vector<int> bins(10, 0);
    for (double x : v) ++bins[std::min(9, static_cast<int>((x + 3.0) / 0.8))];
    for (int b : bins) EXPECT_NEAR(b, 10000, 5 * std::sqrt(10000 * 0.9)) << dtype_name(t);
  }
}

TEST(Rng, UniformNeverRoundsUpToTheUpperBound) {
  // At this stream position the 24-bit uniform is 1 - 2^-24: 1 + that is a tie in f32 that rounds to 2.
  uint64_t seed = 1, offset = 8418514;
  ASSERT_EQ(philox::generate(seed, offset).x[0] >> 8, 0xFFFFFFu);
  Generator g(seed, offset);
  std::vector<float> v = uniform({4}, 1.0, 2.0, g, DType::F32).to_vector<float>();
  EXPECT_LT(v[0], 2.0f);
  EXPECT_EQ(v[0], 0x1.fffffep0f);  // the largest f32 below 2
  // In f64 the 32-bit uniform is 1 - 1.8e-7 there, less than half a step of 1e10 (1.9e-6) below 1: hi again.
  Generator g64(seed, offset);
  double lo = 1e10, hi = 1e10 + 1;
  std::vector<double> d = uniform({4}, lo, hi, g64, DType::F64).to_vector<double>();
  EXPECT_LT(d[0], hi);
  EXPECT_GE(d[0], lo);
}

TEST(Rng, NormalMomentsOnAMillionSamples) {
  const double n = 1e6;
  for (DType t : {DType::F32, DType::F64}) {
    Generator g(fresh_seed());
    std::vector<double> v = randn({1000000}, g, t).to_vector<double>();
    Moments m = moments(v);
    // Five standard errors: sd(mean) = 1/sqrt(n), sd(std) ~ 1/sqrt(2n), sd(skew) ~ sqrt(6/n).
    EXPECT_NEAR(m.mean, 0.0, 5 / std::sqrt(n)) << dtype_name(t);
    EXPECT_NEAR(m.std, 1.0, 5 / std::sqrt(2 * n)) << dtype_name(t);
    EXPECT_NEAR(m.skew, 0.0, 5 * std::sqrt(6 / n)) << dtype_name(t);
    double within = 0;
    for (double x : v) within += std::abs(x) < 1.0;
    const double p = 0.6826894921370859;  // P(|Z| < 1)
    EXPECT_NEAR(within / n, p, 5 * std::sqrt(p * (1 - p) / n)) << dtype_name(t);
    for (double x : v) ASSERT_TRUE(std::isfinite(x));
  }
  Generator g(fresh_seed());
  Moments shifted = moments(normal({200000}, 2.0, 3.0, g, DType::F64).to_vector<double>());
  EXPECT_NEAR(shifted.mean, 2.0, 5 * 3 / std::sqrt(2e5));
  EXPECT_NEAR(shifted.std, 3.0, 5 * 3 / std::sqrt(4e5));
}

TEST(Rng, HostDraws) {
  Generator g(fresh_seed());
  std::vector<int> seen(7, 0);
  for (int i = 0; i < 2000; ++i) {
    double u = g.uniform();
    EXPECT_GE(u, 0.0);
    EXPECT_LT(u, 1.0);
    uint64_t k = g.integer(7);
    ASSERT_LT(k, 7u);
    ++seen[k];
  }
  for (int s : seen) EXPECT_GT(s, 200);
  EXPECT_THROW(g.integer(0), ValueError);
  Generator a(42, 3), b(42, 3);
  EXPECT_EQ(a.uniform(), b.uniform());
  EXPECT_EQ(a.offset(), 4u);
}

TEST(Rng, InPlaceFills) {
  Generator g(fresh_seed());
  Tensor x = zeros({4, 6}, DType::F64);
  Tensor view = x.t();  // not contiguous
  uint64_t v0 = x.version();
  uniform_(view, 2.0, 3.0, g);
  EXPECT_GT(x.version(), v0);
  for (double v : x.to_vector<double>()) {
    EXPECT_GE(v, 2.0);
    EXPECT_LT(v, 3.0);
  }
  // The strided fill draws the same values, in the view's row-major order, as a contiguous one.
  Generator g1(99), g2(99);
  Tensor y = zeros({4, 6}, DType::F32);
  Tensor yt = y.t();
  normal_(yt, 0.0, 1.0, g1);
  expect_bitwise_equal(yt.contiguous(), randn({6, 4}, g2, DType::F32), "normal_ on a transposed view");
  EXPECT_THROW(normal_(x, 0.0, -1.0, g), ValueError);
  EXPECT_THROW(uniform_(x, 1.0, 0.0, g), ValueError);
  Tensor ints = zeros({3}, DType::I64);
  EXPECT_THROW(uniform_(ints, 0.0, 1.0, g), DTypeError);
  Tensor leaf = zeros({3}, DType::F32).set_requires_grad();
  EXPECT_THROW(uniform_(leaf, 0.0, 1.0, g), AutogradError);
}

TEST(Rng, FactoriesHonourOptions) {
  Generator g(fresh_seed());
  Tensor w = randn({3, 2}, g, TensorOptions(DType::F64).with_requires_grad());
  EXPECT_TRUE(w.requires_grad());
  EXPECT_TRUE(w.is_leaf());
  EXPECT_EQ(w.dtype(), DType::F64);
  EXPECT_EQ(w.shape(), (Shape{3, 2}));
  Tensor e = rand({0}, g);
  EXPECT_EQ(e.numel(), 0);
  EXPECT_THROW(uniform({2}, 1.0, 0.0, g), ValueError);
  EXPECT_THROW(normal({2}, 0.0, -1.0, g), ValueError);
}

TEST(RngCuda, MatchesCpuBitForBit) {
  TD_REQUIRE_GPU();
  uint64_t seed = fresh_seed();
  for (DType t : {DType::F32, DType::F64}) {
    for (bool is_normal : {false, true}) {
      Generator cpu_gen(seed, 3), gpu_gen(seed, 3);
      TensorOptions o(t);
      Tensor c = is_normal ? normal({1001}, 0.5, 2.0, cpu_gen, o) : uniform({1001}, -1.0, 4.0, cpu_gen, o);
      Tensor d = is_normal ? normal({1001}, 0.5, 2.0, gpu_gen, o.with_device(Device::cuda(0)))
                           : uniform({1001}, -1.0, 4.0, gpu_gen, o.with_device(Device::cuda(0)));
      EXPECT_EQ(d.device(), Device::cuda(0));
      expect_bitwise_equal(c, d, std::string(is_normal ? "normal " : "uniform ") + dtype_name(t));
      EXPECT_EQ(cpu_gen.offset(), gpu_gen.offset());
    }
  }
}

}  // namespace
}  // namespace tandem
