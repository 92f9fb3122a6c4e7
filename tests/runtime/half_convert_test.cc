// f16 and bf16 conversions through Tensor::to(DType), against hand-computed bit patterns: exact values,
// overflow, subnormals, underflow to zero, signed zeros, infinities, NaN, and round-to-nearest-even ties.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <vector>

#include "runtime/tensor/tensor.h"
#include "tests/testing.h"

namespace tandem {
namespace {

std::vector<uint16_t> bits_of(const Tensor& t) {
  Tensor c = t.contiguous();
  std::vector<uint16_t> b(static_cast<size_t>(c.numel()));
  std::memcpy(b.data(), c.raw_data(), b.size() * 2);
  return b;
}

Tensor from_bits(const std::vector<uint16_t>& b, DType t) {
  Tensor x = empty({static_cast<int64_t>(b.size())}, t);
  std::memcpy(x.raw_data(), b.data(), b.size() * 2);
  return x;
}

uint32_t f32_bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, 4);
  return u;
}

float f32_from_bits(uint32_t u) {
  float f;
  std::memcpy(&f, &u, 4);
  return f;
}

struct Case {
  float value;
  uint16_t bits;
  const char* why;
};

void expect_conversions(const std::vector<Case>& cases, DType t) {
  std::vector<float> values;
  for (const Case& c : cases) values.push_back(c.value);
  std::vector<uint16_t> got = bits_of(from_vector<float>(values, {static_cast<int64_t>(values.size())}).to(t));
  for (size_t i = 0; i < cases.size(); ++i)
    EXPECT_EQ(got[i], cases[i].bits) << dtype_name(t) << " of " << cases[i].value << " (" << cases[i].why << "): got 0x"
                                     << std::hex << got[i] << ", want 0x" << cases[i].bits;
}

TEST(HalfConversion, F32ToF16Bits) {
  const float inf = std::numeric_limits<float>::infinity();
  expect_conversions(
      {
          {1.0f, 0x3C00, "one"},
          {-2.5f, 0xC100, "exact negative"},
          {0.1f, 0x2E66, "inexact, rounds down"},
          {65504.0f, 0x7BFF, "largest finite"},
          {65519.0f, 0x7BFF, "below the midpoint to 65536"},
          {65520.0f, 0x7C00, "midpoint to 65536: ties to even, which is infinity"},
          {1e5f, 0x7C00, "overflow"},
          {-1e5f, 0xFC00, "negative overflow"},
          {0x1p-14f, 0x0400, "smallest normal"},
          {0x1p-14f - 0x1p-24f, 0x03FF, "largest subnormal"},
          {0x1p-24f, 0x0001, "smallest subnormal"},
          {0x1p-25f, 0x0000, "half the smallest subnormal: tie to even zero"},
          {0x1.8p-24f, 0x0002, "1.5 subnormal steps: tie to even 2"},
          {0x1.4p-24f, 0x0001, "1.25 subnormal steps"},
          {1e-8f, 0x0000, "underflow to zero"},
          {-1e-8f, 0x8000, "underflow to negative zero"},
          {1.0f + 0x1p-11f, 0x3C00, "tie between 1 and 1+2^-10: even is 1"},
          {1.0f + 0x1.8p-10f, 0x3C02, "tie between 1+2^-10 and 1+2^-9: even is the upper"},
          {1.0f + 0x1p-11f + 0x1p-20f, 0x3C01, "just above a tie"},
          {0.0f, 0x0000, "zero"},
          {-0.0f, 0x8000, "negative zero"},
          {inf, 0x7C00, "infinity"},
          {-inf, 0xFC00, "negative infinity"},
          {std::numeric_limits<float>::quiet_NaN(), 0x7E00, "NaN"},
      },
      DType::F16);
}

TEST(HalfConversion, F16BitsToF32) {
  std::vector<float> got =
      from_bits({0x0001, 0x03FF, 0x0400, 0x3C00, 0x3555, 0xC000, 0x7BFF, 0x8000, 0xFC00, 0x7E00}, DType::F16)
          .to(DType::F32)
          .to_vector<float>();
  EXPECT_EQ(got[0], 0x1p-24f);
  EXPECT_EQ(got[1], 1023 * 0x1p-24f);
  EXPECT_EQ(got[2], 0x1p-14f);
  EXPECT_EQ(got[3], 1.0f);
  EXPECT_EQ(got[4], 0.333251953125f);
  EXPECT_EQ(got[5], -2.0f);
  EXPECT_EQ(got[6], 65504.0f);
  EXPECT_EQ(f32_bits(got[7]), 0x80000000u);
  EXPECT_EQ(got[8], -std::numeric_limits<float>::infinity());
  EXPECT_TRUE(std::isnan(got[9]));
}

TEST(HalfConversion, F32ToBF16Bits) {
  const float inf = std::numeric_limits<float>::infinity();
  expect_conversions(
      {
          {1.0f, 0x3F80, "one"},
          {-2.5f, 0xC020, "exact negative"},
          {65504.0f, 0x4780, "rounds up to 65536"},
          {1e-8f, 0x322C, "0x322BCC77 rounds up"},
          {1.0f + 0x1p-8f, 0x3F80, "tie, even is below"},
          {1.0f + 0x1.8p-7f, 0x3F82, "tie, even is above"},
          {1.0f + 0x1p-8f + 0x1p-20f, 0x3F81, "just above a tie"},
          {std::numeric_limits<float>::max(), 0x7F80, "rounds to infinity"},
          {f32_from_bits(0x000116C2), 0x0001, "float subnormal"},
          {-0.0f, 0x8000, "negative zero"},
          {inf, 0x7F80, "infinity"},
          {-inf, 0xFF80, "negative infinity"},
          {f32_from_bits(0x7FC00000), 0x7FC0, "quiet NaN"},
          {f32_from_bits(0x7F800001), 0x7FC0, "NaN whose payload would round to infinity stays NaN"},
          {f32_from_bits(0xFFC00000), 0xFFC0, "negative NaN"},
      },
      DType::BF16);
}

TEST(HalfConversion, BF16BitsToF32AreTheTopHalf) {
  std::vector<float> got = from_bits({0x3F80, 0x4049, 0x0001, 0xFF80}, DType::BF16).to(DType::F32).to_vector<float>();
  EXPECT_EQ(got[0], 1.0f);
  EXPECT_EQ(got[1], 3.140625f);
  EXPECT_EQ(f32_bits(got[2]), 0x00010000u);
  EXPECT_EQ(got[3], -std::numeric_limits<float>::infinity());
}

TEST(HalfConversion, EveryNonNaNPatternRoundTripsThroughF32) {
  for (DType t : {DType::F16, DType::BF16}) {
    std::vector<uint16_t> all;
    for (uint32_t b = 0; b < 65536; ++b) {
      bool nan =
          t == DType::F16 ? ((b & 0x7C00) == 0x7C00 && (b & 0x3FF) != 0) : ((b & 0x7F80) == 0x7F80 && (b & 0x7F) != 0);
      if (!nan) all.push_back(static_cast<uint16_t>(b));
    }
    std::vector<uint16_t> back = bits_of(from_bits(all, t).to(DType::F32).to(t));
    ASSERT_EQ(back.size(), all.size());
    size_t mismatches = 0;
    for (size_t i = 0; i < all.size(); ++i) mismatches += back[i] != all[i];
    EXPECT_EQ(mismatches, 0u) << dtype_name(t);
  }
}

TEST(HalfConversion, IntegerAndF64SourcesAndHalfToHalf) {
  // 2049 lies halfway between the f16 neighbours 2048 and 2050: ties to the even 2048.
  EXPECT_EQ(bits_of(from_vector<int32_t>({2049, 2051, -3}, {3}).to(DType::F16)),
            (std::vector<uint16_t>{0x6800, 0x6802, 0xC200}));
  EXPECT_EQ(bits_of(from_vector<double>({0.1, -65504.0}, {2}).to(DType::F16)), (std::vector<uint16_t>{0x2E66, 0xFBFF}));
  // f16 1 + 2^-10 has no bf16 neighbour above within half a step: rounds to 1.
  EXPECT_EQ(bits_of(from_bits({0x3C01, 0xC100}, DType::F16).to(DType::BF16)), (std::vector<uint16_t>{0x3F80, 0xC020}));
  EXPECT_EQ(from_bits({0x4500}, DType::F16).to(DType::I64).to_vector<int64_t>(), (std::vector<int64_t>{5}));
}

}  // namespace
}  // namespace tandem
