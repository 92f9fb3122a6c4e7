// Tests of the number syntax (runtime/base/parse_number.h) and the spec reader (runtime/base/spec_reader.h):
// what each accepts and refuses, and the one error format.
#include <gtest/gtest.h>

#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/parse_number.h"
#include "runtime/base/spec_reader.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using tandem::testing::expect_error;

// The message of the ValueError `fn` throws, or "no error".
template <typename Fn>
std::string message_of(Fn&& fn) {
  try {
    fn();
  } catch (const ValueError& e) {
    return e.message();
  }
  return "no error";
}

TEST(ParseNumber, IntegersAreBaseTenWithinInt64) {
  int64_t v = 0;
  const std::pair<const char*, int64_t> good[] = {{"0", 0},
                                                  {"42", 42},
                                                  {"-7", -7},
                                                  {"007", 7},
                                                  {"-0", 0},
                                                  {"9223372036854775807", INT64_MAX},
                                                  {"-9223372036854775808", INT64_MIN}};
  for (const auto& g : good) {
    EXPECT_TRUE(parse_integer(g.first, &v)) << g.first;
    EXPECT_EQ(v, g.second) << g.first;
  }
  // Overflow, a sign or space other than one leading '-', other bases, fractions, exponents, trailing text.
  for (const char* bad : {"", "-", "9223372036854775808", "-9223372036854775809", "99999999999999999999", "+1", " 1",
                          "1 ", "1x", "0x10", "1e3", "1.0", "1,000", "--1", "inf", "nan"}) {
    v = 123;
    EXPECT_FALSE(parse_integer(bad, &v)) << "'" << bad << "'";
    EXPECT_EQ(v, 123) << "a refused text leaves the output alone: '" << bad << "'";
  }
  EXPECT_TRUE(parse_count("0", &v));
  EXPECT_FALSE(parse_count("-1", &v));
  EXPECT_FALSE(parse_count("+5", &v));
}

TEST(ParseNumber, FiniteNumbersOnly) {
  double v = 0;
  const std::pair<const char*, double> good[] = {{"0.5", 0.5},   {"-2", -2},   {".5", 0.5},         {"5.", 5},
                                                 {"1e-3", 1e-3}, {"1E3", 1e3}, {"-0.25e+2", -25.0}, {"007", 7}};
  for (const auto& g : good) {
    EXPECT_TRUE(parse_finite(g.first, &v)) << g.first;
    EXPECT_EQ(v, g.second) << g.first;
  }
  for (const char* bad : {"",       ".",     "-",      "e5", "1e", "inf", "-inf",  "infinity", "nan", "NaN",
                          "nan(1)", "1e999", "-1e999", "+1", " 1", "1 ",  "0x1p3", "1.5x",     "1,5", "1..5"}) {
    v = 123;
    EXPECT_FALSE(parse_finite(bad, &v)) << "'" << bad << "'";
    EXPECT_EQ(v, 123) << bad;
  }
}

// Random values written as C's printf writes them read back exactly.
TEST(ParseNumber, RandomValuesRoundTrip) {
  std::mt19937_64 rng(tandem::testing::fresh_seed());
  std::uniform_real_distribution<double> exponent(-300, 300);
  for (int i = 0; i < 2000; ++i) {
    const int64_t n = static_cast<int64_t>(rng());
    int64_t got = 0;
    ASSERT_TRUE(parse_integer(std::to_string(n), &got)) << n;
    EXPECT_EQ(got, n);
    const double x = (rng() % 2 ? -1 : 1) * std::pow(10.0, exponent(rng)) * (1 + (rng() % 1000) / 1000.0);
    char text[64];
    std::snprintf(text, sizeof text, "%.17g", x);
    double back = 0;
    ASSERT_TRUE(parse_finite(text, &back)) << text;
    EXPECT_EQ(back, x) << text;
  }
}

TEST(SpecReader, NameRestAndItems) {
  const SpecReader r("dataset spec", "folder:/data/a:b,c");
  EXPECT_EQ(r.name(), "folder");
  EXPECT_TRUE(r.has_rest());
  EXPECT_EQ(r.rest(), "/data/a:b,c");  // positional text as written
  const SpecReader bare("model spec", "resnet18");
  EXPECT_EQ(bare.name(), "resnet18");
  EXPECT_FALSE(bare.has_rest());
  EXPECT_EQ(bare.rest(), "");
  EXPECT_EQ(bare.items("a,b,c", ','), (std::vector<std::string>{"a", "b", "c"}));
  EXPECT_EQ(bare.items("a:b", ','), (std::vector<std::string>{"a:b"}));
  EXPECT_TRUE(bare.items("", ',').empty());
  for (const char* bad : {",", "a,", ",a", "a,,b"})
    EXPECT_NE(message_of([&] { bare.items(bad, ','); }).find("empty item"), std::string::npos) << bad;
}

// The one format: what, the spec quoted, the name and value, what was expected, and the usage when given.
TEST(SpecReader, ErrorsNameTheSpecTheValueAndTheExpectation) {
  const SpecReader r("model spec", "resnet18:width=x");
  EXPECT_EQ(message_of([&] { r.integer("width", "x"); }), "model spec 'resnet18:width=x': width 'x' is not an integer");
  EXPECT_EQ(message_of([&] { r.integer("n", "0", 1, 8); }),
            "model spec 'resnet18:width=x': n '0' is not an integer in [1, 8]");
  EXPECT_EQ(message_of([&] { r.integer("n", "-1", 0); }),
            "model spec 'resnet18:width=x': n '-1' is not an integer >= 0");
  EXPECT_EQ(message_of([&] { r.finite("p", "2", 0, 1); }),
            "model spec 'resnet18:width=x': p '2' is not a finite number in [0, 1]");
  EXPECT_EQ(message_of([&] { r.finite("p", "inf"); }), "model spec 'resnet18:width=x': p 'inf' is not a finite number");
  EXPECT_EQ(message_of([&] { r.boolean("cifar", "2"); }),
            "model spec 'resnet18:width=x': cifar '2' is not one of 1, true, 0, false");
  const SpecReader u("worker spec", "gpu:1", "cpu:N or cuda:I");
  EXPECT_EQ(message_of([&] { u.fail("cannot parse 'gpu:1'"); }),
            "worker spec 'gpu:1': cannot parse 'gpu:1' (expected cpu:N or cuda:I)");
  expect_error<ValueError>([&] { u.integer("n", "99999999999999999999"); },
                           "n '99999999999999999999' is not an integer");
}

TEST(SpecReader, TypedValues) {
  const SpecReader r("x", "x");
  EXPECT_EQ(r.integer("n", "-3", -3, 3), -3);
  EXPECT_EQ(r.integer("n", "3", -3, 3), 3);
  EXPECT_THROW(r.integer("n", "4", -3, 3), ValueError);
  EXPECT_EQ(r.finite("f", "0.25", 0, 1), 0.25);
  EXPECT_THROW(r.finite("f", "1.5", 0, 1), ValueError);
  for (const char* bad : {"nan", "-inf", "1e400", "0.5 ", "0.5abc"})
    EXPECT_THROW(r.finite("f", bad), ValueError) << bad;
  EXPECT_TRUE(r.boolean("b", "true"));
  EXPECT_TRUE(r.boolean("b", "1"));
  EXPECT_FALSE(r.boolean("b", "false"));
  EXPECT_FALSE(r.boolean("b", "0"));
  EXPECT_THROW(r.boolean("b", "yes"), ValueError);
  enum class Color { Red, Green };
  const std::vector<std::pair<std::string, Color>> colors = {{"red", Color::Red}, {"green", Color::Green}};
  EXPECT_EQ(r.choice("color", "green", colors), Color::Green);
  EXPECT_EQ(message_of([&] { r.choice("color", "blue", colors); }), "x 'x': color 'blue' is not one of red, green");
}

TEST(SpecKeys, GettersReadTheirKeysAndFallBack) {
  const SpecReader r("model spec", "m:cifar,w=16,f=0.5,s=abc,sep=false,c=green");
  SpecKeys k(r, ',');
  EXPECT_TRUE(k.flag("cifar", false));
  EXPECT_FALSE(k.flag("sep", true));
  EXPECT_TRUE(k.flag("absent", true));
  EXPECT_EQ(k.integer("w", 0), 16);
  EXPECT_EQ(k.integer("missing", 7), 7);
  EXPECT_EQ(k.finite("f", 0), 0.5);
  EXPECT_EQ(k.text("s", ""), "abc");
  EXPECT_EQ(k.choice<int>("c", 0, {{"red", 1}, {"green", 2}}), 2);
  EXPECT_TRUE(k.has("w"));
  EXPECT_FALSE(k.has("missing"));
  EXPECT_NO_THROW(k.finish());
  // No ':': no keys. Items separated by ':' (transforms).
  const SpecReader bare("m", "m");
  SpecKeys none(bare, ',');
  EXPECT_EQ(none.integer("w", 3), 3);
  const SpecReader t("transform", "random-crop:size=4x4:pad=2");
  SpecKeys colon(t, ':');
  EXPECT_EQ(colon.text("size", ""), "4x4");
  EXPECT_EQ(colon.integer("pad", 0), 2);
}

TEST(SpecKeys, TheLastOfRepeatedKeysCounts) {
  const SpecReader r("model spec", "m:w=1,cifar,w=2,cifar=0");
  SpecKeys k(r, ',');
  EXPECT_EQ(k.integer("w", 0), 2);
  EXPECT_FALSE(k.flag("cifar", true));
  const SpecReader again("model spec", "m:cifar=0,cifar");
  EXPECT_TRUE(SpecKeys(again, ',').flag("cifar", false));
}

TEST(SpecKeys, RefusesMalformedItemsAndValues) {
  auto first_error = [](const std::string& spec) {
    return message_of([&] {
      const SpecReader r("model spec", spec);
      SpecKeys k(r, ',');
      k.flag("cifar", false);
      k.integer("width", 0, 0, 4096);
      k.finite("dropout", -1);
      k.finish();
    });
  };
  const std::pair<const char*, const char*> cases[] = {
      {"m:", "model spec 'm:': nothing follows the ':'"},
      {"m:cifar,,width=2", "model spec 'm:cifar,,width=2': empty item 2 in 'cifar,,width=2'"},
      {"m:cifar,", "empty item 2"},
      {"m:=3", "item '=3' has no key"},
      {"m:width", "width needs a value (width=...)"},
      {"m:width=", "width '' is not an integer in [0, 4096]"},
      {"m:width=99999999999999999999", "width '99999999999999999999' is not an integer"},
      {"m:width=-1", "width '-1' is not an integer in [0, 4096]"},
      {"m:width=8x", "width '8x' is not an integer"},
      {"m:width=8.0", "width '8.0' is not an integer"},
      {"m:width= 8", "width ' 8' is not an integer"},
      {"m:dropout=inf", "dropout 'inf' is not a finite number"},
      {"m:dropout=nan", "dropout 'nan' is not a finite number"},
      {"m:dropout=1e999", "dropout '1e999' is not a finite number"},
      {"m:cifar=2", "cifar '2' is not one of 1, true, 0, false"},
      {"m:depth=3", "unknown key 'depth' (known: cifar, width, dropout)"},
      {"m:cifar,Width=3", "unknown key 'Width'"},
  };
  for (const auto& c : cases)
    EXPECT_NE(first_error(c.first).find(c.second), std::string::npos) << c.first << ": " << first_error(c.first);
  EXPECT_EQ(first_error("m:cifar,width=16,dropout=0.5"), "no error");
  EXPECT_EQ(first_error("m"), "no error");
}

TEST(SpecKeys, APositionalFirstItem) {
  const SpecReader r("transform", "normalize:cifar10:std=1");
  SpecKeys k(r, ':');
  EXPECT_EQ(k.take_positional(), "cifar10");
  EXPECT_EQ(k.take_positional(), "");  // the next has a '='
  EXPECT_EQ(k.text("std", ""), "1");
  EXPECT_NO_THROW(k.finish());
  const SpecReader bare("transform", "normalize:mean=1:cifar10");
  SpecKeys later(bare, ':');
  EXPECT_EQ(later.take_positional(), "");
  later.text("mean", "");
  EXPECT_THROW(later.finish(), ValueError);  // only the first item may be positional
}

}  // namespace
}  // namespace tandem
