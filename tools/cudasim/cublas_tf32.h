// TF32 rounding of float inputs, as tensor cores read them: shared by the simulated cuBLAS and cuDNN.
#pragma once

#include <cstdint>
#include <cstring>

namespace cudasim {

// Keeps float's 8-bit exponent and the top 10 of its 23 mantissa bits, rounding to nearest with ties away
// from zero (PTX's cvt.rna.tf32.f32); infinities and NaNs pass unchanged.
inline float round_tf32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7f800000u) == 0x7f800000u) return f;
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

}  // namespace cudasim
