// The CPU's f32 NCHW max pooling forward (kernels/cpu/nn/max_pool_f32.cc) against a plain scan of each window
// written from the op's contract: the first maximum in row-major window order wins (ties are frequent here:
// values from a small set), a NaN wins over everything (the first one), padding never wins. Fresh random
// geometries: kernels 1 to 4, strides 1 to 3, padding up to half the kernel, floor and ceil output sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "kernels/cpu/nn/max_pool_f32.h"
#include "runtime/base/config.h"
#include "tests/testing.h"

namespace tandem {
namespace {

int64_t out_size(int64_t in, int64_t k, int64_t s, int64_t p, bool ceil_mode) {
  int64_t span = in + 2 * p - k;
  int64_t o = (ceil_mode ? (span + s - 1) / s : span / s) + 1;
  if (ceil_mode && (o - 1) * s >= in + p) --o;  // the last window must start inside the input or left padding
  return o;
}

TEST(CpuMaxPoolF32, MatchesAPlainScanOfEachWindow) {
  std::mt19937_64 rng(testing::fresh_seed());
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (int trial = 0; trial < 200; ++trial) {
    Pool2dGeometry g;
    g.n = 1 + static_cast<int64_t>(rng() % 2);
    g.c = 1 + static_cast<int64_t>(rng() % 3);
    g.kernel_h = 1 + static_cast<int64_t>(rng() % 4);
    g.kernel_w = 1 + static_cast<int64_t>(rng() % 4);
    g.stride_h = 1 + static_cast<int64_t>(rng() % 3);
    g.stride_w = 1 + static_cast<int64_t>(rng() % 3);
    g.pad_h = static_cast<int64_t>(rng() % (g.kernel_h / 2 + 1));
    g.pad_w = static_cast<int64_t>(rng() % (g.kernel_w / 2 + 1));
    g.h = g.kernel_h + static_cast<int64_t>(rng() % 20);
    g.w = g.kernel_w + static_cast<int64_t>(rng() % 40);
    const bool ceil_mode = rng() % 2 == 0;
    g.oh = out_size(g.h, g.kernel_h, g.stride_h, g.pad_h, ceil_mode);
    g.ow = out_size(g.w, g.kernel_w, g.stride_w, g.pad_w, ceil_mode);
    std::vector<float> x(static_cast<size_t>(g.n * g.c * g.h * g.w));
    const bool with_nans = trial % 4 == 0;
    for (float& v : x) {
      v = static_cast<float>(static_cast<int>(rng() % 7) - 5);  // ties, and windows of negatives only
      if (with_nans && rng() % 50 == 0) v = nan;
      if (rng() % 40 == 0) v = -std::numeric_limits<float>::infinity();
    }
    const size_t out = static_cast<size_t>(g.n * g.c * g.oh * g.ow);
    std::vector<float> y(out, 123.f);
    std::vector<int32_t> idx(out, -7);
    ASSERT_TRUE(cpu::max_pool2d_f32_forward(g, x.data(), y.data(), idx.data()));
    for (int64_t p = 0; p < g.n * g.c; ++p)
      for (int64_t oy = 0; oy < g.oh; ++oy)
        for (int64_t ox = 0; ox < g.ow; ++ox) {
          // The reference: visit the window's inside elements in row-major order.
          double best = -INFINITY;
          int64_t arg = -1;
          bool found_nan = false;
          for (int64_t ky = 0; ky < g.kernel_h && !found_nan; ++ky)
            for (int64_t kx = 0; kx < g.kernel_w && !found_nan; ++kx) {
              int64_t ih = oy * g.stride_h - g.pad_h + ky, iw = ox * g.stride_w - g.pad_w + kx;
              if (ih < 0 || ih >= g.h || iw < 0 || iw >= g.w) continue;
              double v = x[static_cast<size_t>(p * g.h * g.w + ih * g.w + iw)];
              if (arg < 0) arg = ih * g.w + iw;  // the first inside element, if nothing beats -inf
              if (std::isnan(v)) {
                best = v;
                arg = ih * g.w + iw;
                found_nan = true;
              } else if (v > best) {
                best = v;
                arg = ih * g.w + iw;
              }
            }
          const size_t o = static_cast<size_t>((p * g.oh + oy) * g.ow + ox);
          if (std::isnan(best))
            EXPECT_TRUE(std::isnan(y[o])) << "trial " << trial << " output " << o;
          else
            EXPECT_EQ(y[o], best) << "trial " << trial << " output " << o;
          EXPECT_EQ(idx[o], arg) << "trial " << trial << " output (" << oy << ", " << ox << ") of plane " << p
                                 << ", kernel " << g.kernel_h << "x" << g.kernel_w << " stride " << g.stride_h << "x"
                                 << g.stride_w << " pad " << g.pad_h << "x" << g.pad_w;
          if (::testing::Test::HasFailure()) return;
        }
  }
}

TEST(CpuMaxPoolF32, StepsAsideWhenSwitchedOffOrNotF32Nchw) {
  Pool2dGeometry g;
  g.n = g.c = g.h = g.w = g.oh = g.ow = 1;
  float x = 1, y = 0;
  int32_t idx = -1;
  g.channels_last = true;
  EXPECT_FALSE(cpu::max_pool2d_f32_forward(g, &x, &y, &idx));
  g.channels_last = false;
  g.dtype = DType::F64;
  EXPECT_FALSE(cpu::max_pool2d_f32_forward(g, &x, &y, &idx));
  g.dtype = DType::F32;
  const bool before = cpu_onednn();
  set_cpu_onednn(false);
  EXPECT_FALSE(cpu::max_pool2d_f32_forward(g, &x, &y, &idx));
  set_cpu_onednn(before);
  EXPECT_EQ(y, 0.f);
  EXPECT_TRUE(cpu::max_pool2d_f32_forward(g, &x, &y, &idx));
  EXPECT_EQ(y, 1.f);
  EXPECT_EQ(idx, 0);
}

}  // namespace
}  // namespace tandem
