// Json: a small JSON value with a strict parser and a writer, for plans, configs and file headers.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace tandem {

class Json {
 public:
  enum class Type { Null, Bool, Number, String, Array, Object };

  Json() = default;
  Json(std::nullptr_t) {}                                          // NOLINT
  Json(bool b) : type_(Type::Bool), bool_(b) {}                    // NOLINT
  Json(double d) : type_(Type::Number), number_(d) {}              // NOLINT
  Json(int v) : Json(static_cast<double>(v)) {}                    // NOLINT
  Json(int64_t v) : Json(static_cast<double>(v)) {}                // NOLINT
  Json(const char* s) : type_(Type::String), string_(s) {}         // NOLINT
  Json(std::string s) : type_(Type::String), string_(std::move(s)) {}  // NOLINT
  static Json array(std::vector<Json> items = {});
  static Json object();

  Type type() const { return type_; }
  bool is_null() const { return type_ == Type::Null; }
  bool is_object() const { return type_ == Type::Object; }
  bool is_array() const { return type_ == Type::Array; }

  // Typed access; throws ValueError naming `what` (e.g. the key path) on a type mismatch.
  bool as_bool(const std::string& what = "value") const;
  double as_number(const std::string& what = "value") const;
  int64_t as_int(const std::string& what = "value") const;  // must be integral
  const std::string& as_string(const std::string& what = "value") const;
  const std::vector<Json>& as_array(const std::string& what = "value") const;
  const std::map<std::string, Json>& as_object(const std::string& what = "value") const;

  // Objects: key access (at() throws ValueError for a missing key), insertion keeps keys sorted.
  bool has(const std::string& key) const;
  const Json& at(const std::string& key) const;
  Json& operator[](const std::string& key);  // makes this an object if null
  // Arrays.
  void push_back(Json v);  // makes this an array if null
  size_t size() const;
  const Json& operator[](size_t i) const;

  // Compact (indent < 0) or pretty JSON text.
  std::string dump(int indent = -1) const;
  // Parses a complete JSON text; throws ValueError with the byte offset of the first error.
  static Json parse(const std::string& text);

 private:
  void dump_to(std::string& out, int indent, int depth) const;
  Type type_ = Type::Null;
  bool bool_ = false;
  double number_ = 0;
  std::string string_;
  std::shared_ptr<std::vector<Json>> array_;
  std::shared_ptr<std::map<std::string, Json>> object_;
};

}  // namespace tandem
