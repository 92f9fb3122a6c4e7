// Integer state read back from checkpoint tensors (steps, positions, counters): whole, finite and in range.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tensor/tensor.h"

namespace tandem {

// The single element of `t` as an integer. Throws ShapeError when `t` does not hold exactly one element and
// ValueError when it is not a whole number within int64 (NaN, 2.5, 1e30): converting such a value to an
// integer type is undefined in C++, and a truncated step count silently changes the training that resumes.
// `what` names the file and key.
int64_t whole_number(const Tensor& t, const std::string& what);

// Checks that every element of `t` converts exactly to `to` (a no-op for floating `to`): whole, finite, in
// `to`'s range. Throws ValueError naming `what`, the element and the value.
void check_converts_exactly(const Tensor& t, DType to, const std::string& what);

}  // namespace tandem
