// Bit-exact float <-> f16 / bf16 conversions (round to nearest even), shared by the CPU and CUDA.
#pragma once

#include <cstdint>
#include <cstring>

#include "runtime/base/hostdevice.h"

namespace tandem {

// A value's bits as another type of the same size (memcpy: no aliasing rules broken; compilers, nvcc's device
// code included, turn it into a register move).
template <typename To, typename From>
TD_HOST_DEVICE To bit_copy(From v) {
  static_assert(sizeof(To) == sizeof(From), "bit_copy needs types of one size");
  To r;
  memcpy(&r, &v, sizeof(To));
  return r;
}
TD_HOST_DEVICE uint32_t float_bits(float f) { return bit_copy<uint32_t>(f); }
TD_HOST_DEVICE float bits_float(uint32_t u) { return bit_copy<float>(u); }

// IEEE binary16, round to nearest even; overflow gives infinity, NaN stays NaN.
TD_HOST_DEVICE uint16_t float_to_f16(float f) {
  uint32_t x = float_bits(f);
  uint32_t sign = (x >> 16) & 0x8000u;
  uint32_t abs = x & 0x7fffffffu;
  if (abs >= 0x7f800000u) return static_cast<uint16_t>(sign | (abs > 0x7f800000u ? 0x7e00u : 0x7c00u));
  if (abs >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // rounds to >= 65520: inf
  if (abs < 0x38800000u) {                                               // result is subnormal or zero
    if (abs < 0x33000000u) return static_cast<uint16_t>(sign);           // below half the smallest subnormal
    uint32_t exp = abs >> 23;
    uint32_t mant = (abs & 0x7fffffu) | 0x800000u;
    uint32_t shift = 126u - exp;  // value / 2^-24 = mant * 2^(exp - 126), exp in [102, 112]
    uint32_t half = mant >> shift;
    uint32_t rem = mant & ((1u << shift) - 1u);
    uint32_t mid = 1u << (shift - 1u);
    if (rem > mid || (rem == mid && (half & 1u))) ++half;
    return static_cast<uint16_t>(sign | half);
  }
  uint32_t h = ((abs >> 13) - (112u << 10));  // rebias exponent 127 -> 15
  uint32_t rem = abs & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (h & 1u))) ++h;
  return static_cast<uint16_t>(sign | h);
}

TD_HOST_DEVICE float f16_to_float(uint16_t h) {
  uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  uint32_t exp = (h >> 10) & 0x1fu;
  uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return bits_float(sign);
    // subnormal: value = mant * 2^-24
    float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));
}

// bfloat16: the top 16 bits of a float, round to nearest even; NaN stays NaN.
TD_HOST_DEVICE uint16_t float_to_bf16(float f) {
  uint32_t x = float_bits(f);
  if ((x & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((x >> 16) | 0x40u);
  uint32_t rounding = 0x7fffu + ((x >> 16) & 1u);
  return static_cast<uint16_t>((x + rounding) >> 16);
}

TD_HOST_DEVICE float bf16_to_float(uint16_t b) { return bits_float(static_cast<uint32_t>(b) << 16); }

// A bf16 element as kernels hold it in memory (bf16 storage, f32 math): reading one widens it to f32 exactly,
// making one rounds an f32 to nearest even.
struct BFloat16 {
  uint16_t bits;
  BFloat16() = default;
  TD_HOST_DEVICE explicit BFloat16(float f) : bits(float_to_bf16(f)) {}
  TD_HOST_DEVICE explicit operator float() const { return bf16_to_float(bits); }
};

}  // namespace tandem
