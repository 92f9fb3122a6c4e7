// Counts read from text (checkpoint metadata, environment variables): whole, non-negative, within int64.
#pragma once

#include <cstdint>
#include <string>

namespace tandem {

// A non-negative base-10 integer within int64 (strtoll's syntax, nothing after it), or false.
bool parse_count(const std::string& text, int64_t* out);

}  // namespace tandem
