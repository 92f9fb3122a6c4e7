// The spec reader: splitting, typed values through parse_number.h, and the one error format.
#include "runtime/base/spec_reader.h"

#include <algorithm>

#include "runtime/base/parse_number.h"

namespace tandem {

namespace {
// "an integer", "an integer >= 1", "an integer in [1, 8]" (the same for "a finite number").
template <typename T>
std::string bounded(const std::string& kind, T min, T max, T no_min, T no_max) {
  if (min == no_min && max == no_max) return kind;
  if (max == no_max) return detail::concat(kind, " >= ", min);
  if (min == no_min) return detail::concat(kind, " <= ", max);
  return detail::concat(kind, " in [", min, ", ", max, "]");
}
}  // namespace

SpecReader::SpecReader(std::string what, std::string spec, std::string usage)
    : what_(std::move(what)), spec_(std::move(spec)), usage_(std::move(usage)) {}

std::string SpecReader::name() const { return spec_.substr(0, spec_.find(':')); }

bool SpecReader::has_rest() const { return spec_.find(':') != std::string::npos; }

std::string SpecReader::rest() const { return has_rest() ? spec_.substr(spec_.find(':') + 1) : std::string(); }

std::vector<std::string> SpecReader::items(const std::string& text, char sep) const {
  std::vector<std::string> out;
  if (text.empty()) return out;
  size_t start = 0;
  while (true) {
    const size_t end = text.find(sep, start);
    out.push_back(text.substr(start, end == std::string::npos ? std::string::npos : end - start));
    if (out.back().empty()) fail("empty item ", out.size(), text == spec_ ? "" : " in '" + text + "'");
    if (end == std::string::npos) return out;
    start = end + 1;
  }
}

int64_t SpecReader::integer(const std::string& name, const std::string& value, int64_t min, int64_t max) const {
  int64_t v = 0;
  if (!parse_integer(value, &v) || v < min || v > max)
    not_a(name, value, bounded<int64_t>("an integer", min, max, kNoMin, kNoMax));
  return v;
}

double SpecReader::finite(const std::string& name, const std::string& value, double min, double max) const {
  double v = 0;
  if (!parse_finite(value, &v) || v < min || v > max)
    not_a(name, value, bounded("a finite number", min, max, -kInf, kInf));
  return v;
}

bool SpecReader::boolean(const std::string& name, const std::string& value) const {
  return choice<bool>(name, value, {{"1", true}, {"true", true}, {"0", false}, {"false", false}});
}

void SpecReader::not_a(const std::string& name, const std::string& value, const std::string& expectation) const {
  fail(name, " '", value, "' is not ", expectation);
}

void SpecReader::raise(const std::string& problem) const {
  TD_THROW(ValueError, what_, " '", spec_, "': ", problem, usage_.empty() ? "" : " (expected " + usage_ + ")");
}

SpecKeys::SpecKeys(const SpecReader& reader, char sep) : reader_(reader) {
  if (reader.has_rest() && reader.rest().empty()) reader.fail("nothing follows the ':'");
  for (const std::string& item : reader.items(reader.rest(), sep)) {
    const size_t eq = item.find('=');
    Item it;
    it.key = item.substr(0, eq);
    it.has_value = eq != std::string::npos;
    if (it.has_value) it.value = item.substr(eq + 1);
    if (it.key.empty()) reader.fail("item '", item, "' has no key");
    items_.push_back(it);
  }
}

std::string SpecKeys::take_positional() {
  if (items_.empty() || items_.front().has_value) return "";
  std::string v = items_.front().key;
  items_.erase(items_.begin());
  return v;
}

bool SpecKeys::has(const std::string& key) const {
  return std::any_of(items_.begin(), items_.end(), [&](const Item& it) { return it.key == key; });
}

const SpecKeys::Item* SpecKeys::find(const std::string& key, bool bare_ok) {
  known_.push_back(key);
  const Item* last = nullptr;
  for (const Item& it : items_)
    if (it.key == key) last = &it;
  if (last != nullptr && !last->has_value && !bare_ok) reader_.fail(key, " needs a value (", key, "=...)");
  return last;
}

int64_t SpecKeys::integer(const std::string& key, int64_t fallback, int64_t min, int64_t max) {
  const Item* it = find(key);
  return it ? reader_.integer(key, it->value, min, max) : fallback;
}

double SpecKeys::finite(const std::string& key, double fallback, double min, double max) {
  const Item* it = find(key);
  return it ? reader_.finite(key, it->value, min, max) : fallback;
}

bool SpecKeys::flag(const std::string& key, bool fallback) {
  const Item* it = find(key, /*bare_ok=*/true);
  if (it == nullptr) return fallback;
  return !it->has_value || reader_.boolean(key, it->value);
}

std::string SpecKeys::text(const std::string& key, const std::string& fallback) {
  const Item* it = find(key);
  return it ? it->value : fallback;
}

void SpecKeys::finish() const {
  for (const Item& it : items_) {
    if (std::find(known_.begin(), known_.end(), it.key) != known_.end()) continue;
    std::string known;
    for (const std::string& k : known_) known += (known.empty() ? "" : ", ") + k;
    reader_.fail("unknown key '", it.key, "' (known: ", known.empty() ? "none" : known, ")");
  }
}

}  // namespace tandem
