// Philox4x32-10 and the uniform/normal transforms, written once for the host and CUDA kernels so that
// both produce bit-identical values: only +, -, *, / and sqrt (IEEE-exact everywhere), no FMA contraction.
#pragma once

#include <math.h>

#include <cstdint>

#include "runtime/base/hostdevice.h"

namespace tandem {
namespace philox {

struct Block {
  uint32_t x[4];
};

TD_HOST_DEVICE void mulhilo(uint32_t a, uint32_t b, uint32_t& hi, uint32_t& lo) {
  uint64_t p = static_cast<uint64_t>(a) * b;
  hi = static_cast<uint32_t>(p >> 32);
  lo = static_cast<uint32_t>(p);
}

// Four 32-bit random words for (seed, counter).
TD_HOST_DEVICE Block generate(uint64_t seed, uint64_t counter) {
  uint32_t c0 = static_cast<uint32_t>(counter), c1 = static_cast<uint32_t>(counter >> 32), c2 = 0, c3 = 0;
  uint32_t k0 = static_cast<uint32_t>(seed), k1 = static_cast<uint32_t>(seed >> 32);
  for (int round = 0; round < 10; ++round) {
    uint32_t hi0, lo0, hi1, lo1;
    mulhilo(0xD2511F53u, c0, hi0, lo0);
    mulhilo(0xCD9E8D57u, c2, hi1, lo1);
    uint32_t n0 = hi1 ^ c1 ^ k0, n2 = hi0 ^ c3 ^ k1;
    c0 = n0;
    c1 = lo1;
    c2 = n2;
    c3 = lo0;
    k0 += 0x9E3779B9u;
    k1 += 0xBB67AE85u;
  }
  Block b;
  b.x[0] = c0;
  b.x[1] = c1;
  b.x[2] = c2;
  b.x[3] = c3;
  return b;
}

// Exact double arithmetic that the CUDA compiler may not fuse.
TD_HOST_DEVICE double dmul(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dmul_rn(a, b);
#else
  return a * b;
#endif
}
TD_HOST_DEVICE double dadd(double a, double b) {
#if defined(__CUDA_ARCH__)
  return __dadd_rn(a, b);
#else
  return a + b;
#endif
}
TD_HOST_DEVICE double dsqrt(double a) {
#if defined(__CUDA_ARCH__)
  return __dsqrt_rn(a);
#else
  return __builtin_sqrt(a);
#endif
}

// Natural log of u in (0, 1], from exact operations only (error about 1e-16).
TD_HOST_DEVICE double log_unit(double u) {
  // u = m * 2^e with m in [sqrt(1/2), sqrt(2)); scaling by 2 is exact.
  int e = 0;
  double m = u;
  while (m < 0.70710678118654752) {
    m = dmul(m, 2.0);
    --e;
  }
  double s = (m - 1.0) / (m + 1.0);  // |s| <= 0.1716
  double s2 = dmul(s, s);
  // log(m) = 2 (s + s^3/3 + s^5/5 + ...), 12 terms: error < 1e-17.
  double term = s, acc = 0.0;
  for (int k = 0; k < 12; ++k) {
    acc = dadd(acc, term / static_cast<double>(2 * k + 1));
    term = dmul(term, s2);
  }
  return dadd(dmul(2.0, acc), dmul(static_cast<double>(e), 0.69314718055994530942));
}

// sin and cos of 2*pi*t for t in [0, 1) (t a dyadic fraction, so the quadrant split is exact).
TD_HOST_DEVICE void sincos_turn(double t, double& s, double& c) {
  double q4 = dmul(t, 4.0);
  int q = static_cast<int>(q4);
  double r = q4 - static_cast<double>(q);  // in [0, 1): the angle r * pi/2 within the quadrant
  bool swap = r > 0.5;
  if (swap) r = 1.0 - r;
  double x = dmul(r, 1.57079632679489661923);  // in [0, pi/4]
  double x2 = dmul(x, x);
  // Taylor series to x^17 / x^16: error < 1e-17 on [0, pi/4].
  double sn = 0.0, cs = 0.0, ts = x, tc = 1.0;
  for (int k = 0; k < 9; ++k) {
    sn = dadd(sn, ts);
    cs = dadd(cs, tc);
    ts = dmul(ts, -x2) / static_cast<double>((2 * k + 2) * (2 * k + 3));
    tc = dmul(tc, -x2) / static_cast<double>((2 * k + 1) * (2 * k + 2));
  }
  double sin_r = swap ? cs : sn, cos_r = swap ? sn : cs;  // sin/cos of r*pi/2
  switch (q) {
    case 0:
      s = sin_r;
      c = cos_r;
      break;
    case 1:
      s = cos_r;
      c = -sin_r;
      break;
    case 2:
      s = -sin_r;
      c = -cos_r;
      break;
    default:
      s = -cos_r;
      c = sin_r;
      break;
  }
}

// Value i of the stream (seed, offset): counter offset + i/4, word i%4.
// Uniform in [0, 1) with 24 random bits (exact as a float).
TD_HOST_DEVICE double uniform24(uint32_t w) { return static_cast<double>(w >> 8) * (1.0 / 16777216.0); }
// Uniform in [0, 1) with 32 random bits (for f64 outputs).
TD_HOST_DEVICE double uniform32(uint32_t w) { return static_cast<double>(w) * (1.0 / 4294967296.0); }

// A uniform value of T in [lo, hi) from u in [0, 1). lo + (hi - lo) * u is below hi, but rounding it to T
// can reach hi (in f32, 1 + (1 - 2^-24) is a tie that rounds to 2): such a value becomes the next T below.
TD_HOST_DEVICE float next_below(float v) { return nextafterf(v, -3.402823466e38f); }
TD_HOST_DEVICE double next_below(double v) { return nextafter(v, -1.7976931348623157e308); }
template <typename T>
TD_HOST_DEVICE T uniform_in(double lo, double hi, double u) {
  T v = static_cast<T>(dadd(lo, dmul(hi - lo, u)));
  if (hi > lo && static_cast<double>(v) >= hi) v = next_below(v);
  return v;
}

// Standard normals of the word pair (0,1) or (2,3) of a counter, by Box-Muller: `even` for its first word,
// `odd` for its second.
TD_HOST_DEVICE void normal_pair(const Block& b, int pair, double& even, double& odd) {
  double u1 = (static_cast<double>(b.x[pair]) + 1.0) * (1.0 / 4294967296.0);  // (0, 1]
  double u2 = uniform32(b.x[pair + 1]);                                       // [0, 1)
  double radius = dsqrt(dmul(-2.0, log_unit(u1)));
  double s, c;
  sincos_turn(u2, s, c);
  even = dmul(radius, c);
  odd = dmul(radius, s);
}

// Standard normal for value i: word i%4 of its counter.
TD_HOST_DEVICE double normal_at(const Block& b, int word) {
  double even, odd;
  normal_pair(b, word & 2, even, odd);
  return (word & 1) ? odd : even;
}

// A standard normal z as a value of T with mean a and standard deviation b_.
template <typename T>
TD_HOST_DEVICE T normal_value(double z, double a, double b_) {
  return static_cast<T>(dadd(a, dmul(b_, z)));
}

// Word w of block b as a value of T: normal(mean a, std b_) or uniform in [a, b_). The CUDA random kernel calls
// this, the CPU's sample_block below (same bits), so the two agree bit for bit.
template <typename T>
TD_HOST_DEVICE T sample(const Block& b, int w, bool normal, double a, double b_) {
  if (normal) return normal_value<T>(normal_at(b, w), a, b_);
  double u = sizeof(T) == 4 ? uniform24(b.x[w]) : uniform32(b.x[w]);
  return uniform_in<T>(a, b_, u);
}

// The four values sample gives for words 0-3 of b, each normal pair computed once (the CPU's whole blocks).
template <typename T>
TD_HOST_DEVICE void sample_block(const Block& b, bool normal, double a, double b_, T* out) {
  if (!normal) {
    for (int w = 0; w < 4; ++w) out[w] = sample<T>(b, w, false, a, b_);
    return;
  }
  for (int pair = 0; pair < 4; pair += 2) {
    double even, odd;
    normal_pair(b, pair, even, odd);
    out[pair] = normal_value<T>(even, a, b_);
    out[pair + 1] = normal_value<T>(odd, a, b_);
  }
}

}  // namespace philox
}  // namespace tandem
