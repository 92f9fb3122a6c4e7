// Dtype dispatch macros for kernel code: run a body with `scalar_t` bound to the element type.
#pragma once

#include <cstdint>

#include "runtime/base/dtype.h"
#include "runtime/base/error.h"
#include "runtime/base/half.h"

namespace tandem {
// The type a kernel computes an element of type T in: f32 for bf16 (loaded as BFloat16, rounded once on store),
// T itself otherwise.
template <typename T>
struct ComputeOf {
  using type = T;
};
template <>
struct ComputeOf<BFloat16> {
  using type = float;
};
template <typename T>
using compute_t = typename ComputeOf<T>::type;
}  // namespace tandem

#define TD_DISPATCH_CASE(DT, T, ...) \
  case ::tandem::DType::DT: {        \
    using scalar_t = T;              \
    __VA_ARGS__;                     \
    break;                           \
  }

// f32 and f64: the compute dtypes.
#define TD_DISPATCH_FLOAT(dtype, what, ...)                                                          \
  switch (dtype) {                                                                                   \
    TD_DISPATCH_CASE(F32, float, __VA_ARGS__)                                                        \
    TD_DISPATCH_CASE(F64, double, __VA_ARGS__)                                                       \
    default: TD_THROW(DTypeError, what, " supports f32 and f64, not ", ::tandem::dtype_name(dtype)); \
  }

// f32, f64 and bf16 (scalar_t = BFloat16, computed in compute_t<scalar_t> = float): ops whose kernels load and
// store bf16 with f32 math.
#define TD_DISPATCH_FLOAT_BF16(dtype, what, ...)                                                           \
  switch (dtype) {                                                                                         \
    TD_DISPATCH_CASE(F32, float, __VA_ARGS__)                                                              \
    TD_DISPATCH_CASE(F64, double, __VA_ARGS__)                                                             \
    TD_DISPATCH_CASE(BF16, ::tandem::BFloat16, __VA_ARGS__)                                                \
    default: TD_THROW(DTypeError, what, " supports f32, f64 and bf16, not ", ::tandem::dtype_name(dtype)); \
  }

// Every dtype with arithmetic on the host/device: f32, f64, i32, i64, u8 (f16/bf16 are storage only).
#define TD_DISPATCH_NUMERIC(dtype, what, ...)                                       \
  switch (dtype) {                                                                  \
    TD_DISPATCH_CASE(F32, float, __VA_ARGS__)                                       \
    TD_DISPATCH_CASE(F64, double, __VA_ARGS__)                                      \
    TD_DISPATCH_CASE(I32, int32_t, __VA_ARGS__)                                     \
    TD_DISPATCH_CASE(I64, int64_t, __VA_ARGS__)                                     \
    TD_DISPATCH_CASE(U8, uint8_t, __VA_ARGS__)                                      \
    default:                                                                        \
      TD_THROW(DTypeError, what, " does not support ", ::tandem::dtype_name(dtype), \
               " (f16/bf16 are storage types: convert with .to(DType::F32))");      \
  }

// By element size, for ops that only move data (index_select, gather).
#define TD_DISPATCH_BYTES(dtype, ...)    \
  switch (::tandem::dtype_size(dtype)) { \
    case 1: {                            \
      using scalar_t = uint8_t;          \
      __VA_ARGS__;                       \
      break;                             \
    }                                    \
    case 2: {                            \
      using scalar_t = uint16_t;         \
      __VA_ARGS__;                       \
      break;                             \
    }                                    \
    case 4: {                            \
      using scalar_t = uint32_t;         \
      __VA_ARGS__;                       \
      break;                             \
    }                                    \
    default: {                           \
      using scalar_t = uint64_t;         \
      __VA_ARGS__;                       \
      break;                             \
    }                                    \
  }
