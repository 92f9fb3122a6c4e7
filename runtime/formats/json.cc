// Json's strict parser (nlohmann's, plus limits and byte positions in its errors), typed reads and writer.
#include "runtime/formats/json.h"

#include <cctype>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <limits>
#include <nlohmann/json.hpp>
#include <set>
#include <vector>

#include "runtime/base/error.h"

namespace tandem {

namespace {

constexpr int kMaxDepth = 200;

// The text as nlohmann's parser reads it, recording how far it has read: the parse callback, which refuses
// duplicate keys and deep nesting, is not told the position itself.
class TrackedChars {
 public:
  using iterator_category = std::input_iterator_tag;
  using value_type = char;
  using difference_type = std::ptrdiff_t;
  using pointer = const char*;
  using reference = const char&;
  TrackedChars(const char* p, const char** read_to) : p_(p), read_to_(read_to) {}
  reference operator*() const { return *p_; }
  TrackedChars& operator++() {
    *read_to_ = ++p_;
    return *this;
  }
  TrackedChars operator++(int) {
    TrackedChars before = *this;
    ++*this;
    return before;
  }
  bool operator==(const TrackedChars& o) const { return p_ == o.p_; }
  bool operator!=(const TrackedChars& o) const { return p_ != o.p_; }

 private:
  const char* p_;
  const char** read_to_;
};

// nlohmann's explanation without its "[json.exception.parse_error.101] parse error at line 1, column 9: " prefix
// (the callers give the byte).
std::string explanation(const Json::exception& e) {
  std::string s = e.what();
  size_t end = s.find("] ");
  if (end != std::string::npos) s.erase(0, end + 2);
  if (s.compare(0, 12, "parse error ") == 0 && s.find(": ") != std::string::npos) s.erase(0, s.find(": ") + 2);
  return s;
}

// Where a parse error starts, counting from 1. nlohmann gives the last byte it read: the offending byte inside a
// token it could not read, but the last byte of a well-formed token that does not belong there (a string where a
// ',' is due): that token is walked back to its first byte.
size_t error_byte(const std::string& text, const Json::parse_error& e) {
  const size_t last = e.byte;
  const bool inside_token = std::string(e.what()).find("; last read: '") != std::string::npos;  // the lexer's
  if (last == 0 || last > text.size() || inside_token) return last;
  size_t first = last - 1;  // 0-based
  const auto c = [&](size_t i) { return static_cast<unsigned char>(text[i]); };
  if (text[first] == '"') {
    // Back to the opening quote: the first one before it that no backslash escapes.
    while (first > 0) {
      --first;
      if (text[first] != '"') continue;
      size_t slashes = 0;
      while (slashes < first && text[first - 1 - slashes] == '\\') ++slashes;
      if (slashes % 2 == 0) break;
    }
  } else if (std::isalpha(c(first))) {  // true, false, null
    while (first > 0 && std::isalpha(c(first - 1))) --first;
  } else if (std::isdigit(c(first))) {  // a number
    const auto in_number = [&](size_t i) {
      return std::isdigit(c(i)) || std::string("+-.eE").find(text[i]) != std::string::npos;
    };
    while (first > 0 && in_number(first - 1)) --first;
  }
  return first + 1;
}

const char* type_name(const Json& v) {
  switch (v.type()) {
    case Json::value_t::null: return "null";
    case Json::value_t::boolean: return "a boolean";
    case Json::value_t::number_integer:
    case Json::value_t::number_unsigned:
    case Json::value_t::number_float: return "a number";
    case Json::value_t::string: return "a string";
    case Json::value_t::array: return "an array";
    case Json::value_t::object: return "an object";
    case Json::value_t::binary: return "binary data";
    case Json::value_t::discarded: return "a discarded value";
  }
  return "?";
}

void check_finite(const Json& v) {
  if (v.is_number_float()) {
    TD_CHECK(std::isfinite(v.get<double>()), "JSON cannot hold the number ", v.get<double>());
  } else if (v.is_structured()) {
    for (const Json& item : v) check_finite(item);
  }
}

}  // namespace

Json parse_json(const std::string& text) {
  const char* read_to = text.data();
  const auto at = [&] { return static_cast<size_t>(read_to - text.data()); };
  std::vector<std::set<std::string>> keys;  // the keys seen so far in each object being read, innermost last
  const auto check = [&](int depth, Json::parse_event_t event, Json& parsed) {
    switch (event) {
      case Json::parse_event_t::object_start: keys.emplace_back(); [[fallthrough]];
      case Json::parse_event_t::array_start:
        if (depth > kMaxDepth)
          TD_THROW(ValueError, "invalid JSON at byte ", at(), ": nested deeper than ", kMaxDepth, " levels");
        break;
      case Json::parse_event_t::key: {
        const std::string& key = parsed.get_ref<const std::string&>();
        if (!keys.back().insert(key).second)
          TD_THROW(ValueError, "invalid JSON at byte ", at(), ": duplicate key '", key, "'");
        break;
      }
      case Json::parse_event_t::object_end: keys.pop_back(); break;
      default: break;
    }
    return true;
  };
  try {
    const char* end = text.data() + text.size();
    return Json::parse(TrackedChars(text.data(), &read_to), TrackedChars(end, &read_to), check);
  } catch (const Json::parse_error& e) {
    TD_THROW(ValueError, "invalid JSON at byte ", error_byte(text, e), ": ", explanation(e));
  } catch (const Json::exception& e) {  // a number beyond a double (out_of_range 406) names the number itself
    TD_THROW(ValueError, "invalid JSON: ", explanation(e));
  }
}

std::string dump_json(const Json& value, int indent) {
  check_finite(value);
  try {
    return value.dump(indent);
  } catch (const Json::type_error& e) {  // a string that is not UTF-8
    TD_THROW(ValueError, "cannot write JSON: ", explanation(e));
  }
}

#define TD_JSON_EXPECT(test, name) TD_CHECK(value.test(), what, " should be " name " but is ", type_name(value))

const Json& json_object(const Json& value, const std::string& what) {
  TD_JSON_EXPECT(is_object, "an object");
  return value;
}
const Json& json_array(const Json& value, const std::string& what) {
  TD_JSON_EXPECT(is_array, "an array");
  return value;
}
const std::string& json_string(const Json& value, const std::string& what) {
  TD_JSON_EXPECT(is_string, "a string");
  return value.get_ref<const std::string&>();
}
double json_number(const Json& value, const std::string& what) {
  TD_JSON_EXPECT(is_number, "a number");
  return value.get<double>();
}
int64_t json_int(const Json& value, const std::string& what) {
  TD_JSON_EXPECT(is_number, "an integer");
  if (value.is_number_unsigned()) {
    const uint64_t u = value.get<uint64_t>();
    TD_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), what, " should be an integer but is ", u,
             ", more than 2^63-1");
    return static_cast<int64_t>(u);
  }
  if (value.is_number_integer()) return value.get<int64_t>();
  // Written as a float ("3.0", "1e3"): accepted when integral and exact in a double.
  const double d = value.get<double>();
  TD_CHECK(std::floor(d) == d && std::abs(d) < 9007199254740992.0, what, " should be an integer but is ", value.dump());
  return static_cast<int64_t>(d);
}

#undef TD_JSON_EXPECT

const Json& json_at(const Json& object, const std::string& key) {
  json_object(object, "JSON value holding '" + key + "'");
  auto it = object.find(key);
  TD_CHECK(it != object.end(), "missing key '", key, "'");
  return *it;
}

}  // namespace tandem
