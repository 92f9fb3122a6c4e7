// Overflow-checked size arithmetic for the readers of untrusted files: a result that does not fit throws IoError.
#pragma once

#include <cstdint>
#include <type_traits>

#include "runtime/base/error.h"

namespace tandem {

// a * b. On overflow throws IoError "<what...>: A * B does not fit in N bits"; `what` names the file and the
// field (e.g. path, ": image dimensions") and is only formatted on failure.
template <typename T, typename... What>
T checked_mul(T a, T b, const What&... what) {
  static_assert(std::is_integral<T>::value, "checked_mul needs integers");
  T r;
  if (__builtin_expect(__builtin_mul_overflow(a, b, &r), 0))
    TD_THROW(IoError, what..., ": ", +a, " * ", +b, " does not fit in ", 8 * sizeof(T), " bits");
  return r;
}

// a + b, with the same contract as checked_mul.
template <typename T, typename... What>
T checked_add(T a, T b, const What&... what) {
  static_assert(std::is_integral<T>::value, "checked_add needs integers");
  T r;
  if (__builtin_expect(__builtin_add_overflow(a, b, &r), 0))
    TD_THROW(IoError, what..., ": ", +a, " + ", +b, " does not fit in ", 8 * sizeof(T), " bits");
  return r;
}

}  // namespace tandem
