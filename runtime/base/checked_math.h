// Overflow-checked size arithmetic for the readers of untrusted files: a result that does not fit throws IoError.
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/base/error.h"

namespace tandem {

// r = a op b, where `overflowed` says whether it fit. On overflow throws IoError "<what...>: A op B does not fit
// in N bits"; `what` names the file and the field (e.g. path, ": image dimensions") and is only formatted then.
template <typename T, typename... What>
T checked_result(bool overflowed, T r, T a, const char* op, T b, const What&... what) {
  static_assert(std::is_integral<T>::value, "checked arithmetic needs integers");
  if (__builtin_expect(overflowed, 0))
    TD_THROW(IoError, what..., ": ", +a, op, +b, " does not fit in ", 8 * sizeof(T), " bits");
  return r;
}

// a * b, or IoError as checked_result says.
template <typename T, typename... What>
T checked_mul(T a, T b, const What&... what) {
  T r;
  const bool overflowed = __builtin_mul_overflow(a, b, &r);
  return checked_result(overflowed, r, a, " * ", b, what...);
}

// a + b, or IoError as checked_result says.
template <typename T, typename... What>
T checked_add(T a, T b, const What&... what) {
  T r;
  const bool overflowed = __builtin_add_overflow(a, b, &r);
  return checked_result(overflowed, r, a, " + ", b, what...);
}

}  // namespace tandem
