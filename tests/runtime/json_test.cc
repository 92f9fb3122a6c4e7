// Json (runtime/formats/json.h): the strict parser's refusals with their byte positions (RFC 8259 grammar), the limits
// on nesting, numbers and keys, the typed reads' messages, and the writer's exact text.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <nlohmann/json.hpp>
#include <random>
#include <string>

#include "runtime/base/error.h"
#include "runtime/formats/json.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using testing::error_of;

std::string parse_error_of(const std::string& text) {
  return error_of<ValueError>([&] { parse_json(text); });
}

TEST(Json, RefusesWhatTheGrammarDoesNotAllowWithTheByteOfTheFault) {
  // Each text breaks one rule of RFC 8259; the byte (counting from 1) is the first byte of the fault.
  const std::pair<std::string, size_t> cases[] = {
      {"", 1},                   // no value at all
      {"{\"a\":1 \"b\":2}", 8},  // a member where ',' or '}' is due: the string "b" starts at byte 8
      {"[1,]", 4},               // a trailing comma: ']' where a value is due
      {"{,}", 2},                // ',' where a key is due
      {"{'a':1}", 2},            // single quotes are not JSON
      {"[\"\\q\"]", 4},          // an escape that does not exist: the 'q'
      {"[\"a\nb\"]", 4},         // a raw control character inside a string
      {"[\"\xff\"]", 3},         // a byte that is not UTF-8
      {"[\"\\ud800\"]", 9},      // a lone high surrogate (ends at the closing quote)
      {"[tru]", 5},              // a misspelt literal (read up to the byte that differs)
      {"[+1]", 2},               // numbers have no '+' sign
      {"[.5]", 2},               // nor a bare fraction
      {"[NaN]", 2},              // nor NaN
      {"[1 2]", 4},              // two values without a comma
      {"{\"a\":1} x", 9},        // trailing text
      {"{\"a\":1}{}", 8},        // a second value
      {"[1] // note", 5},        // comments are not JSON
      {"[\"abc", 6},             // an unterminated string (the end of the text)
  };
  for (const auto& c : cases) {
    const std::string msg = parse_error_of(c.first);
    EXPECT_MENTIONS(msg, "invalid JSON at byte " + std::to_string(c.second) + ":") << " for text " << c.first;
  }
  // Whitespace around the value is allowed.
  EXPECT_EQ(json_int(json_at(parse_json(" \t\r\n{\"a\" : 7 }\n "), "a"), "a"), 7);
}

TEST(Json, RefusesDuplicateKeysInTheSameObjectOnly) {
  // The second "k" of the inner object ends at byte 15.
  EXPECT_MENTIONS(parse_error_of("{\"a\":{\"k\":1,\"k\":2}}"), "invalid JSON at byte 15: duplicate key 'k'");
  // The same key in sibling or nested objects is fine.
  Json j = parse_json("{\"k\":{\"k\":1},\"x\":{\"k\":2}}");
  EXPECT_EQ(json_int(json_at(json_at(j, "x"), "k"), "k"), 2);
  // Escapes are compared after decoding: "\u0061" is "a".
  EXPECT_MENTIONS(parse_error_of("{\"a\":1,\"\\u0061\":2}"), "duplicate key 'a'");
}

TEST(Json, NestingIsLimitedTo200LevelsBelowTheTop) {
  auto nested = [](int levels) { return std::string(levels, '[') + std::string(levels, ']'); };
  EXPECT_EQ(parse_json(nested(201)).size(), 1u);
  EXPECT_MENTIONS(parse_error_of(nested(202)), "invalid JSON at byte 202: nested deeper than 200 levels");
  // Far deeper input is refused at the same point, without exhausting the stack.
  EXPECT_MENTIONS(parse_error_of(std::string(1000000, '[')), "at byte 202: nested deeper");
  EXPECT_MENTIONS(parse_error_of("{\"a\":" + nested(201) + "}"), "at byte 206: nested deeper");
}

TEST(Json, NumbersBeyondADoubleAreRefusedAndIntegersAreExact) {
  EXPECT_MENTIONS(parse_error_of("[1e999]"), "number overflow parsing '1e999'");
  EXPECT_MENTIONS(parse_error_of("{\"a\":-1e400}"), "number overflow parsing '-1e400'");
  const int64_t max = std::numeric_limits<int64_t>::max(), min = std::numeric_limits<int64_t>::min();
  Json j = parse_json(
      "[9223372036854775807, -9223372036854775808, 9223372036854775808, 18446744073709551616, "
      "3.0, 1e3, 2.5, 1e300, 9007199254740993.0, -0]");
  EXPECT_EQ(json_int(j[0], "max"), max);  // exact, not rounded through a double
  EXPECT_EQ(json_int(j[1], "min"), min);
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_int(j[2], "2^63"); }),
                  "2^63 should be an integer but is 9223372036854775808");
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_int(j[3], "2^64"); }), "2^64 should be an integer");
  EXPECT_EQ(json_number(j[3], "2^64"), 18446744073709551616.0);
  EXPECT_EQ(json_int(j[4], "3.0"), 3);  // integral values written as floats
  EXPECT_EQ(json_int(j[5], "1e3"), 1000);
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_int(j[6], "half"); }), "half should be an integer but is 2.5");
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_int(j[7], "big"); }), "big should be an integer but is 1e+300");
  // A float beyond 2^53 may have been rounded already: refused rather than trusted.
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_int(j[8], "rounded"); }), "rounded should be an integer");
  EXPECT_EQ(json_int(j[9], "zero"), 0);
}

TEST(Json, TypedReadsNameWhatWasExpectedAndWhatWasFound) {
  Json j = parse_json("{\"s\":\"x\",\"n\":1.5,\"a\":[1],\"o\":{},\"b\":true,\"z\":null}");
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_string(json_at(j, "n"), "the name"); }),
                  "the name should be a string but is a number");
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_number(json_at(j, "s"), "the rate"); }),
                  "the rate should be a number but is a string");
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_int(json_at(j, "b"), "the count"); }),
                  "the count should be an integer but is a boolean");
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_array(json_at(j, "o"), "the list"); }),
                  "the list should be an array but is an object");
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_object(json_at(j, "z"), "the table"); }),
                  "the table should be an object but is null");
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_at(j, "missing"); }), "missing key 'missing'");
  EXPECT_MENTIONS(error_of<ValueError>([&] { json_at(json_at(j, "a"), "k"); }),
                  "JSON value holding 'k' should be an object but is an array");
  EXPECT_EQ(json_string(json_at(j, "s"), "s"), "x");
  EXPECT_EQ(json_number(json_at(j, "n"), "n"), 1.5);
}

TEST(Json, WritesCompactAndIndentedTextWithSortedKeys) {
  Json j = Json::object();
  j["zeta"] = int64_t{-12};
  j["alpha"] = Json::array({Json(1), Json("two"), Json(nullptr), Json(false)});
  j["mid"] = Json::object();
  j["esc"] = std::string("q\" b\\ n\n t\t \x01 \xc3\xa9");
  // RFC 8259 section 7: '"', '\' and control characters are escaped; other UTF-8 text is written as is.
  const std::string esc = "\"q\\\" b\\\\ n\\n t\\t \\u0001 \xc3\xa9\"";
  EXPECT_EQ(dump_json(j), "{\"alpha\":[1,\"two\",null,false],\"esc\":" + esc + ",\"mid\":{},\"zeta\":-12}");
  EXPECT_EQ(dump_json(j, 1), "{\n \"alpha\": [\n  1,\n  \"two\",\n  null,\n  false\n ],\n \"esc\": " + esc +
                                 ",\n \"mid\": {},\n \"zeta\": -12\n}");
  // Integers are written exactly, however large.
  EXPECT_EQ(dump_json(Json(std::numeric_limits<int64_t>::max())), "9223372036854775807");
}

TEST(Json, WrittenTextReadsBackToTheSameValues) {
  std::mt19937_64 gen(tandem::testing::fresh_seed());
  std::uniform_real_distribution<double> real(-1e6, 1e6);
  std::uniform_int_distribution<int64_t> whole(std::numeric_limits<int64_t>::min(),
                                               std::numeric_limits<int64_t>::max());
  std::uniform_int_distribution<int> byte(1, 127);
  Json j = Json::object();
  for (int i = 0; i < 50; ++i) {
    std::string key(1 + i % 7, 'k');
    for (char& c : key) c = static_cast<char>(byte(gen));
    key += std::to_string(i);  // distinct keys
    j[key] = Json::array({Json(real(gen)), Json(whole(gen)), Json(key)});
  }
  for (int indent : {-1, 0, 2}) {
    Json back = parse_json(dump_json(j, indent));
    EXPECT_EQ(back, j) << "indent " << indent;  // doubles in shortest round-trip form read back bit for bit
  }
}

TEST(Json, RefusesToWriteWhatJsonCannotHold) {
  for (double bad : {std::nan(""), HUGE_VAL, -HUGE_VAL}) {
    Json j = Json::object();
    j["loss"] = Json::array({Json(1.0), Json(bad)});
    EXPECT_MENTIONS(error_of<ValueError>([&] { dump_json(j); }), "JSON cannot hold the number");
  }
  Json s = std::string("bad \xff byte");
  EXPECT_MENTIONS(error_of<ValueError>([&] { dump_json(s); }), "cannot write JSON: invalid UTF-8 byte at index 4");
}

}  // namespace
}  // namespace tandem
