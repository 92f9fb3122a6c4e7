// JSON parsing and writing.
#include "runtime/formats/json.h"

#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "runtime/base/error.h"

namespace tandem {

Json Json::array(std::vector<Json> items) {
  Json j;
  j.type_ = Type::Array;
  j.array_ = std::make_shared<std::vector<Json>>(std::move(items));
  return j;
}

Json Json::object() {
  Json j;
  j.type_ = Type::Object;
  j.object_ = std::make_shared<std::map<std::string, Json>>();
  return j;
}

namespace {
const char* type_name(Json::Type t) {
  switch (t) {
    case Json::Type::Null: return "null";
    case Json::Type::Bool: return "a boolean";
    case Json::Type::Number: return "a number";
    case Json::Type::String: return "a string";
    case Json::Type::Array: return "an array";
    case Json::Type::Object: return "an object";
  }
  return "?";
}
}  // namespace

#define TD_JSON_EXPECT(T, name)                                                                       \
  TD_CHECK(type_ == Type::T, what, " should be " name " but is ", type_name(type_))

bool Json::as_bool(const std::string& what) const { TD_JSON_EXPECT(Bool, "a boolean"); return bool_; }
double Json::as_number(const std::string& what) const { TD_JSON_EXPECT(Number, "a number"); return number_; }
int64_t Json::as_int(const std::string& what) const {
  TD_JSON_EXPECT(Number, "an integer");
  TD_CHECK(std::floor(number_) == number_ && std::abs(number_) < 9.007199254740992e15, what,
           " should be an integer but is ", number_);
  return static_cast<int64_t>(number_);
}
const std::string& Json::as_string(const std::string& what) const { TD_JSON_EXPECT(String, "a string"); return string_; }
const std::vector<Json>& Json::as_array(const std::string& what) const { TD_JSON_EXPECT(Array, "an array"); return *array_; }
const std::map<std::string, Json>& Json::as_object(const std::string& what) const {
  TD_JSON_EXPECT(Object, "an object");
  return *object_;
}
#undef TD_JSON_EXPECT

bool Json::has(const std::string& key) const { return type_ == Type::Object && object_->count(key) > 0; }

const Json& Json::at(const std::string& key) const {
  const auto& o = as_object("JSON value holding '" + key + "'");
  auto it = o.find(key);
  TD_CHECK(it != o.end(), "missing key '", key, "'");
  return it->second;
}

Json& Json::operator[](const std::string& key) {
  if (type_ == Type::Null) *this = object();
  TD_CHECK(type_ == Type::Object, "cannot set key '", key, "' on ", type_name(type_));
  return (*object_)[key];
}

void Json::push_back(Json v) {
  if (type_ == Type::Null) *this = array();
  TD_CHECK(type_ == Type::Array, "cannot append to ", type_name(type_));
  array_->push_back(std::move(v));
}

size_t Json::size() const {
  if (type_ == Type::Array) return array_->size();
  if (type_ == Type::Object) return object_->size();
  return 0;
}

const Json& Json::operator[](size_t i) const {
  const auto& a = as_array("indexed value");
  TD_CHECK_INDEX(i < a.size(), "JSON array index ", i, " out of range (size ", a.size(), ")");
  return a[i];
}

namespace {
void dump_string(std::string& out, const std::string& s) {
  out += '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  out += '"';
}
void newline(std::string& out, int indent, int depth) {
  if (indent < 0) return;
  out += '\n';
  out.append(static_cast<size_t>(indent * depth), ' ');
}
}  // namespace

void Json::dump_to(std::string& out, int indent, int depth) const {
  switch (type_) {
    case Type::Null: out += "null"; break;
    case Type::Bool: out += bool_ ? "true" : "false"; break;
    case Type::Number: {
      TD_CHECK(std::isfinite(number_), "JSON cannot hold the number ", number_);
      char buf[32];
      if (std::floor(number_) == number_ && std::abs(number_) < 1e15)
        std::snprintf(buf, sizeof buf, "%.0f", number_);
      else
        std::snprintf(buf, sizeof buf, "%.17g", number_);
      out += buf;
      break;
    }
    case Type::String: dump_string(out, string_); break;
    case Type::Array: {
      out += '[';
      for (size_t i = 0; i < array_->size(); ++i) {
        if (i) out += ',';
        newline(out, indent, depth + 1);
        (*array_)[i].dump_to(out, indent, depth + 1);
      }
      if (!array_->empty()) newline(out, indent, depth);
      out += ']';
      break;
    }
    case Type::Object: {
      out += '{';
      bool first = true;
      for (const auto& [k, v] : *object_) {
        if (!first) out += ',';
        first = false;
        newline(out, indent, depth + 1);
        dump_string(out, k);
        out += indent < 0 ? ":" : ": ";
        v.dump_to(out, indent, depth + 1);
      }
      if (!object_->empty()) newline(out, indent, depth);
      out += '}';
      break;
    }
  }
}

std::string Json::dump(int indent) const {
  std::string out;
  dump_to(out, indent, 0);
  return out;
}

namespace {
class Parser {
 public:
  explicit Parser(const std::string& t) : t_(t) {}
  Json parse_document() {
    Json v = value(0);
    skip_ws();
    if (pos_ != t_.size()) fail("unexpected text after the JSON value");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) {
    TD_THROW(ValueError, "invalid JSON at byte ", pos_, ": ", why);
  }
  void skip_ws() {
    while (pos_ < t_.size() && (t_[pos_] == ' ' || t_[pos_] == '\n' || t_[pos_] == '\t' || t_[pos_] == '\r')) ++pos_;
  }
  char peek() {
    skip_ws();
    if (pos_ >= t_.size()) fail("unexpected end of text");
    return t_[pos_];
  }
  void expect(char c) {
    if (peek() != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }
  bool literal(const char* word) {
    size_t n = std::char_traits<char>::length(word);
    if (t_.compare(pos_, n, word) == 0) {
      pos_ += n;
      return true;
    }
    return false;
  }
  Json value(int depth) {
    if (depth > 200) fail("nesting too deep");
    char c = peek();
    if (c == '{') return object(depth);
    if (c == '[') return array(depth);
    if (c == '"') return Json(string());
    if (literal("true")) return Json(true);
    if (literal("false")) return Json(false);
    if (literal("null")) return Json();
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail(std::string("unexpected character '") + c + "'");
  }
  Json object(int depth) {
    expect('{');
    Json o = Json::object();
    if (peek() == '}') {
      ++pos_;
      return o;
    }
    for (;;) {
      if (peek() != '"') fail("expected a string key");
      std::string k = string();
      if (o.has(k)) fail("duplicate key '" + k + "'");
      expect(':');
      o[k] = value(depth + 1);
      char c = peek();
      ++pos_;
      if (c == '}') return o;
      if (c != ',') fail("expected ',' or '}'");
    }
  }
  Json array(int depth) {
    expect('[');
    Json a = Json::array();
    if (peek() == ']') {
      ++pos_;
      return a;
    }
    for (;;) {
      a.push_back(value(depth + 1));
      char c = peek();
      ++pos_;
      if (c == ']') return a;
      if (c != ',') fail("expected ',' or ']'");
    }
  }
  std::string string() {
    expect('"');
    std::string s;
    while (pos_ < t_.size()) {
      char c = t_[pos_++];
      if (c == '"') return s;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        s += c;
        continue;
      }
      if (pos_ >= t_.size()) break;
      char e = t_[pos_++];
      switch (e) {
        case '"': s += '"'; break;
        case '\\': s += '\\'; break;
        case '/': s += '/'; break;
        case 'b': s += '\b'; break;
        case 'f': s += '\f'; break;
        case 'n': s += '\n'; break;
        case 'r': s += '\r'; break;
        case 't': s += '\t'; break;
        case 'u': {
          if (pos_ + 4 > t_.size()) fail("truncated \\u escape");
          unsigned cp = static_cast<unsigned>(std::strtoul(t_.substr(pos_, 4).c_str(), nullptr, 16));
          pos_ += 4;
          // UTF-8 encode (surrogate pairs are not combined: plain BMP code points suffice here).
          if (cp < 0x80) {
            s += static_cast<char>(cp);
          } else if (cp < 0x800) {
            s += static_cast<char>(0xC0 | (cp >> 6));
            s += static_cast<char>(0x80 | (cp & 0x3F));
          } else {
            s += static_cast<char>(0xE0 | (cp >> 12));
            s += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
            s += static_cast<char>(0x80 | (cp & 0x3F));
          }
          break;
        }
        default: fail(std::string("bad escape '\\") + e + "'");
      }
    }
    fail("unterminated string");
  }
  Json number() {
    size_t start = pos_;
    if (t_[pos_] == '-') ++pos_;
    while (pos_ < t_.size() && std::string("0123456789.eE+-").find(t_[pos_]) != std::string::npos) ++pos_;
    std::string text = t_.substr(start, pos_ - start);
    char* end = nullptr;
    double v = std::strtod(text.c_str(), &end);
    if (end == nullptr || *end != '\0' || text.empty() || text == "-") {
      pos_ = start;
      fail("malformed number '" + text + "'");
    }
    return Json(v);
  }
  const std::string& t_;
  size_t pos_ = 0;
};
}  // namespace

Json Json::parse(const std::string& text) { return Parser(text).parse_document(); }

}  // namespace tandem
