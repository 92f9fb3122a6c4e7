// The simulated NCCL's datatypes (sizes, names, f16 and bf16 arithmetic) and its reductions.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>

#include "tools/cudasim/nccl_internal.h"

namespace cudasim {
namespace nccl {

namespace {

struct TypeInfo {
  ncclDataType_t type;
  const char* name;
  size_t size;
};

const TypeInfo kTypes[] = {
    {ncclInt8, "ncclInt8", 1},         {ncclUint8, "ncclUint8", 1},           {ncclInt32, "ncclInt32", 4},
    {ncclUint32, "ncclUint32", 4},     {ncclInt64, "ncclInt64", 8},           {ncclUint64, "ncclUint64", 8},
    {ncclFloat16, "ncclFloat16", 2},   {ncclFloat32, "ncclFloat32", 4},       {ncclFloat64, "ncclFloat64", 8},
    {ncclBfloat16, "ncclBfloat16", 2}, {ncclFloat8e4m3, "ncclFloat8e4m3", 1}, {ncclFloat8e5m2, "ncclFloat8e5m2", 1},
};

const TypeInfo* info(ncclDataType_t t) {
  for (const TypeInfo& i : kTypes)
    if (i.type == t) return &i;
  return nullptr;
}

float float_of(uint32_t x) {
  float f;
  std::memcpy(&f, &x, sizeof(f));
  return f;
}

uint32_t bits_of(float f) {
  uint32_t x;
  std::memcpy(&x, &f, sizeof(x));
  return x;
}

// Rounds v to nearest, ties to even, onto a binary format with `fraction_bits` and normal exponents down to
// `min_exponent` (subnormal below); beyond `max` it is an infinity. A sum or product of two f16 or bf16
// values is exact in double, so this one rounding gives the correctly rounded result of GPU arithmetic.
double round_to(double v, int fraction_bits, int min_exponent, double max) {
  if (v == 0 || !std::isfinite(v)) return v;
  int e;
  std::frexp(v, &e);  // |v| = f * 2^e with f in [0.5, 1): its leading bit is 2^(e-1)
  const double quantum = std::ldexp(1.0, std::max(e - 1, min_exponent) - fraction_bits);
  const double r = std::nearbyint(v / quantum) * quantum;  // scaling by a power of two is exact
  return std::fabs(r) > max ? std::copysign(HUGE_VAL, v) : r;
}

double half_to_double(uint16_t h) {
  const double sign = (h & 0x8000) != 0 ? -1.0 : 1.0;
  const int exponent = (h >> 10) & 0x1f, fraction = h & 0x3ff;
  if (exponent == 0x1f) return fraction != 0 ? std::nan("") : sign * HUGE_VAL;
  if (exponent == 0) return sign * std::ldexp(fraction, -24);
  return sign * std::ldexp(1024 + fraction, exponent - 25);
}

uint16_t double_to_half(double v) {
  const uint16_t sign = std::signbit(v) ? 0x8000 : 0;
  if (std::isnan(v)) return 0x7e00;
  const double r = std::fabs(round_to(v, 10, -14, 65504.0));
  if (std::isinf(r)) return static_cast<uint16_t>(sign | 0x7c00);
  if (r < 0x1p-14) return static_cast<uint16_t>(sign | static_cast<uint16_t>(r * 0x1p24));  // subnormal units
  int e;
  std::frexp(r, &e);
  const auto fraction = static_cast<uint16_t>(std::ldexp(r, 11 - e) - 1024);
  return static_cast<uint16_t>(sign | ((e + 14) << 10) | fraction);
}

double bf16_to_double(uint16_t b) { return float_of(static_cast<uint32_t>(b) << 16); }

uint16_t double_to_bf16(double v) {
  if (std::isnan(v)) return 0x7fc0;
  // The rounded value is a float whose low 16 bits are zero.
  const double r = round_to(v, 7, -126, 0x1.fep127);
  return static_cast<uint16_t>(bits_of(static_cast<float>(r)) >> 16);
}

// Floating point: each step computed in V (the type itself, or double for the 16-bit types) and rounded back.
template <typename S, typename V, typename Get, typename Put>
void reduce_float(ncclRedOp_t op, const std::vector<const void*>& in, S* out, size_t count, Get get, Put put) {
  const size_t n = in.size();
  for (size_t i = 0; i < count; ++i) {
    S acc = static_cast<const S*>(in[0])[i];
    for (size_t r = 1; r < n; ++r) {
      const V a = get(acc), b = get(static_cast<const S*>(in[r])[i]);
      switch (op) {
        case ncclProd: acc = put(a * b); break;
        case ncclMax: acc = put(std::fmax(a, b)); break;
        case ncclMin: acc = put(std::fmin(a, b)); break;
        default: acc = put(a + b); break;  // ncclSum, ncclAvg
      }
    }
    if (op == ncclAvg) acc = put(get(acc) / static_cast<V>(n));
    out[i] = acc;
  }
}

// Integers: sums and products wrap (computed unsigned, which C++ defines); ncclAvg divides the sum.
template <typename T>
void reduce_int(ncclRedOp_t op, const std::vector<const void*>& in, T* out, size_t count) {
  using U = std::make_unsigned_t<T>;
  const size_t n = in.size();
  for (size_t i = 0; i < count; ++i) {
    T acc = static_cast<const T*>(in[0])[i];
    for (size_t r = 1; r < n; ++r) {
      const T b = static_cast<const T*>(in[r])[i];
      switch (op) {
        case ncclProd: acc = static_cast<T>(static_cast<U>(static_cast<U>(acc) * static_cast<U>(b))); break;
        case ncclMax: acc = acc < b ? b : acc; break;
        case ncclMin: acc = b < acc ? b : acc; break;
        default: acc = static_cast<T>(static_cast<U>(static_cast<U>(acc) + static_cast<U>(b))); break;
      }
    }
    if (op == ncclAvg) acc = static_cast<T>(acc / static_cast<T>(n));
    out[i] = acc;
  }
}

template <typename T>
void reduce_native(ncclRedOp_t op, const std::vector<const void*>& in, void* out, size_t count) {
  auto same = [](T v) { return v; };
  reduce_float<T, T>(op, in, static_cast<T*>(out), count, same, same);
}

}  // namespace

size_t type_size(ncclDataType_t t) {
  const TypeInfo* i = info(t);
  return i != nullptr ? i->size : 0;
}

std::string type_name(ncclDataType_t t) {
  const TypeInfo* i = info(t);
  return i != nullptr ? i->name : "datatype " + std::to_string(static_cast<int>(t));
}

std::string op_name(ncclRedOp_t op) {
  switch (op) {
    case ncclSum: return "ncclSum";
    case ncclProd: return "ncclProd";
    case ncclMax: return "ncclMax";
    case ncclMin: return "ncclMin";
    case ncclAvg: return "ncclAvg";
    default: return "reduction op " + std::to_string(static_cast<int>(op));
  }
}

bool reducible(ncclDataType_t t) { return info(t) != nullptr && t != ncclFloat8e4m3 && t != ncclFloat8e5m2; }

void reduce(ncclRedOp_t op, ncclDataType_t t, const std::vector<const void*>& in, void* out, size_t count) {
  switch (t) {
    case ncclInt8: reduce_int(op, in, static_cast<int8_t*>(out), count); break;
    case ncclUint8: reduce_int(op, in, static_cast<uint8_t*>(out), count); break;
    case ncclInt32: reduce_int(op, in, static_cast<int32_t*>(out), count); break;
    case ncclUint32: reduce_int(op, in, static_cast<uint32_t*>(out), count); break;
    case ncclInt64: reduce_int(op, in, static_cast<int64_t*>(out), count); break;
    case ncclUint64: reduce_int(op, in, static_cast<uint64_t*>(out), count); break;
    case ncclFloat32: reduce_native<float>(op, in, out, count); break;
    case ncclFloat64: reduce_native<double>(op, in, out, count); break;
    case ncclFloat16:
      reduce_float<uint16_t, double>(op, in, static_cast<uint16_t*>(out), count, half_to_double, double_to_half);
      break;
    case ncclBfloat16:
      reduce_float<uint16_t, double>(op, in, static_cast<uint16_t*>(out), count, bf16_to_double, double_to_bf16);
      break;
    default: break;  // the API refuses the others before they get here
  }
}

}  // namespace nccl
}  // namespace cudasim
