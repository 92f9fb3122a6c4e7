// IntDivider (kernels/cuda/int_divider.cuh), run on the host: quotients and remainders equal the division's for
// every divisor up to 4096 and fresh random ones up to 2^32 - 1 (powers of two and their neighbours among them), at
// the numerators where a wrong magic number shows first (0, multiples of the divisor and their neighbours, the top
// of the range) and at fresh random ones.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <vector>

#include "kernels/cuda/int_divider.cuh"
#include "tests/testing.h"

namespace tandem {
namespace {

using cuda::IntDivider;

// The numerators to try for divisor d: edges and `fresh` random values.
std::vector<uint32_t> numerators(uint32_t d, std::mt19937_64& rng, int fresh) {
  const uint64_t top = UINT32_MAX;
  std::vector<uint64_t> v{0, 1, top, top - 1, uint64_t{1} << 31, (uint64_t{1} << 31) - 1, d - 1, d, uint64_t{d} + 1};
  const uint64_t last = top / d * d;  // the largest multiple of d in range
  for (uint64_t m : {uint64_t{2} * d, last, last - d, top / 2 / d * d})
    for (int64_t e : {-1, 0, 1}) v.push_back(m + e);
  for (int i = 0; i < fresh; ++i) v.push_back(rng() & top);
  std::vector<uint32_t> out;
  for (uint64_t n : v)
    if (n <= top) out.push_back(static_cast<uint32_t>(n));
  return out;
}

void expect_divides(uint32_t d, std::mt19937_64& rng, int fresh) {
  const IntDivider div(d);
  for (uint32_t n : numerators(d, rng, fresh)) {
    ASSERT_EQ(div.div(n), n / d) << n << " / " << d;
    ASSERT_EQ(div.mod(n), n % d) << n << " % " << d;
  }
}

TEST(IntDivider, SmallDivisors) {
  std::mt19937_64 rng(testing::fresh_seed());
  for (uint32_t d = 1; d <= 4096; ++d) expect_divides(d, rng, 64);
}

TEST(IntDivider, LargeDivisors) {
  std::mt19937_64 rng(testing::fresh_seed());
  std::vector<uint32_t> ds{UINT32_MAX, UINT32_MAX - 1, (uint32_t{1} << 31) + 1};
  for (int s = 12; s < 32; ++s)
    for (int64_t e : {-1, 0, 1}) ds.push_back(static_cast<uint32_t>((int64_t{1} << s) + e));
  for (int i = 0; i < 2000; ++i) ds.push_back(static_cast<uint32_t>(rng() % UINT32_MAX) + 1);
  for (uint32_t d : ds) expect_divides(d, rng, 256);
}

}  // namespace
}  // namespace tandem
