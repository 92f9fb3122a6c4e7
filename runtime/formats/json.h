// Json: nlohmann::json with a strict parser, typed reads and a checked writer (<nlohmann/json.hpp> in .cc files only).
#pragma once

#include <nlohmann/json_fwd.hpp>

#include <cstdint>
#include <string>

namespace tandem {

using Json = nlohmann::json;

// Parses one complete JSON text, refusing duplicate keys, nesting deeper than 200 levels, numbers beyond a
// double and trailing text. Throws ValueError "invalid JSON at byte N: ..." (N counts from 1).
Json parse_json(const std::string& text);

// Compact (indent < 0) or pretty text. Throws ValueError for a NaN or infinity (nlohmann would write null) and
// for a string that is not UTF-8.
std::string dump_json(const Json& value, int indent = -1);

// Typed reads: each throws ValueError naming `what` (e.g. "tensor 'w' dtype") when the value has another type.
const Json& json_at(const Json& object, const std::string& key);  // and when the key is missing
const Json& json_object(const Json& value, const std::string& what);
const Json& json_array(const Json& value, const std::string& what);
const std::string& json_string(const Json& value, const std::string& what);
double json_number(const Json& value, const std::string& what);
int64_t json_int(const Json& value, const std::string& what);  // integral, exact in an int64

}  // namespace tandem
