// strtoll with every failure it can report checked: empty text, trailing characters, overflow, a negative value.
#include "runtime/base/parse_count.h"

#include <cerrno>
#include <cstdlib>

namespace tandem {

bool parse_count(const std::string& text, int64_t* out) {
  char* end = nullptr;
  errno = 0;
  const long long v = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || *end != '\0' || errno != 0 || v < 0) return false;
  *out = v;
  return true;
}

}  // namespace tandem
