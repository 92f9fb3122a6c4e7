// std::from_chars (locale-independent; no '+', spaces or hexadecimal in the general format), with every failure
// it reports checked: nothing read, text left over, a value out of range; and infinity and NaN refused.
#include "runtime/base/parse_number.h"

#include <charconv>
#include <cmath>

namespace tandem {

namespace {
template <typename T>
bool whole_text(const std::string& text, T* out) {
  const char* end = text.data() + text.size();
  T v{};
  const std::from_chars_result r = std::from_chars(text.data(), end, v);
  if (r.ec != std::errc() || r.ptr != end) return false;
  *out = v;
  return true;
}
}  // namespace

bool parse_integer(const std::string& text, int64_t* out) { return whole_text(text, out); }

bool parse_count(const std::string& text, int64_t* out) {
  int64_t v = 0;
  if (!parse_integer(text, &v) || v < 0) return false;
  *out = v;
  return true;
}

bool parse_finite(const std::string& text, double* out) {
  double v = 0;
  if (!whole_text(text, &v) || !std::isfinite(v)) return false;
  *out = v;
  return true;
}

}  // namespace tandem
