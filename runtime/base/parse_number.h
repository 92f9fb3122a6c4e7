// Numbers read from text (specs, checkpoint metadata, environment variables) under one syntax: base 10, an
// optional '-' (no '+', spaces, hexadecimal, infinity or NaN), nothing after the number, a value its type holds.
#pragma once

#include <cstdint>
#include <string>

namespace tandem {

// An integer within int64 ("42", "-7", "007"), or false.
bool parse_integer(const std::string& text, int64_t* out);
// A non-negative integer within int64, or false.
bool parse_count(const std::string& text, int64_t* out);
// A finite number within a double's range ("0.5", "-2", ".5", "1e-3"), or false.
bool parse_finite(const std::string& text, double* out);

}  // namespace tandem
