// tools/flags: values reach their variables, bounds and malformed values are usage errors (exit 2, the flag
// and the value named), unknown flags are reported or handed on, and --help lists every flag.
#include "tools/flags/flags.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "tests/testing.h"

namespace tandem {
namespace {

struct Values {
  std::string name = "default";
  int64_t count = 7;
  int threads = 2;
  uint64_t seed = 0;
  double rate = 0.5;
  std::vector<int64_t> sizes = {4, 8};
  std::vector<std::string> kinds = {"a"};
  bool fast = false;
  std::string mode = "x";
};

// A parser of every kind of flag, with group and footer, over `v`.
struct Example {
  Values v;
  flags::Parser p{"example", "example [flags]", "Parses flags for the test."};
  Example() {
    p.text("--name", "NAME", &v.name, "a name\nover two lines");
    p.integer("--count", "N", &v.count, "a count (default 7)", 1);
    p.integer("--threads", "K", &v.threads, "threads", 0);
    p.integer("--seed", "S", &v.seed, "a seed");
    p.group("more");
    p.number("--rate", "X", &v.rate, "a rate", 0);
    p.integers("--sizes", "LIST", &v.sizes, "sizes", 1);
    p.words("--kinds", "LIST", &v.kinds, "kinds");
    p.flag("--fast", &v.fast, true, "go fast");
    p.custom(
        "--mode", "M",
        [this](const std::string& m) {
          TD_CHECK(m == "x" || m == "y", "unknown mode '", m, "'");
          v.mode = m;
        },
        "x or y");
    p.footer("The end.");
  }
  void parse(std::vector<std::string> args) {
    args.insert(args.begin(), "example");
    std::vector<const char*> argv;
    for (const std::string& a : args) argv.push_back(a.c_str());
    p.parse(static_cast<int>(argv.size()), argv.data());
  }
};

TEST(Flags, DefaultsStayWhenNotGiven) {
  Example e;
  e.parse({});
  EXPECT_EQ(e.v.name, "default");
  EXPECT_EQ(e.v.count, 7);
  EXPECT_EQ(e.v.sizes, (std::vector<int64_t>{4, 8}));
  EXPECT_FALSE(e.v.fast);
}

TEST(Flags, ValuesReachTheirVariables) {
  std::mt19937_64 rng(testing::fresh_seed());
  const int64_t count = 1 + static_cast<int64_t>(rng() % 1000000);
  const int64_t big = static_cast<int64_t>(rng() >> 2);
  Example e;
  e.parse({"--name", "resnet18:cifar,width=16", "--count", std::to_string(count), "--threads=0", "--seed",
           std::to_string(big), "--rate", "2.5e-3", "--sizes", "32,224," + std::to_string(count), "--kinds", "p,q",
           "--fast", "--mode", "y"});
  EXPECT_EQ(e.v.name, "resnet18:cifar,width=16");
  EXPECT_EQ(e.v.count, count);
  EXPECT_EQ(e.v.threads, 0);
  EXPECT_EQ(e.v.seed, static_cast<uint64_t>(big));
  EXPECT_EQ(e.v.rate, 2.5e-3);
  EXPECT_EQ(e.v.sizes, (std::vector<int64_t>{32, 224, count}));
  EXPECT_EQ(e.v.kinds, (std::vector<std::string>{"p", "q"}));
  EXPECT_TRUE(e.v.fast);
  EXPECT_EQ(e.v.mode, "y");
}

TEST(Flags, TheLastOfARepeatedFlagCountsAndIntegersAreDecimal) {
  Example e;
  e.parse({"--count", "3", "--count", "010", "--sizes", "1", "--sizes", "2,3"});
  EXPECT_EQ(e.v.count, 10);  // not octal
  EXPECT_EQ(e.v.sizes, (std::vector<int64_t>{2, 3}));
}

void expect_usage_error(std::vector<std::string> args, const std::string& message) {
  EXPECT_EXIT(Example().parse(args), ::testing::ExitedWithCode(2),
              "example: " + message + "\nusage: example \\[flags\\]\n\\(run example --help");
}

TEST(Flags, BadValuesAreUsageErrors) {
  expect_usage_error({"--count", "x"}, "--count needs an integer >= 1, got 'x'");
  expect_usage_error({"--count", "0"}, "--count needs an integer >= 1, got '0'");
  expect_usage_error({"--count", "12abc"}, "--count needs an integer >= 1, got '12abc'");
  expect_usage_error({"--count", "99999999999999999999"}, "--count needs an integer >= 1, got '99999999999999999999'");
  expect_usage_error({"--threads", "3000000000"}, "--threads needs an integer of at most 2147483647, got '3000000000'");
  expect_usage_error({"--seed", "-1"}, "--seed needs an integer >= 0, got '-1'");
  expect_usage_error({"--rate", "-0.1"}, "--rate needs a number >= 0, got '-0.1'");
  expect_usage_error({"--rate", "nan"}, "--rate needs a number >= 0, got 'nan'");
  expect_usage_error({"--sizes", "4,,8"}, "--sizes needs an integer >= 1, got ''");
  expect_usage_error({"--sizes", "4,0"}, "--sizes needs an integer >= 1, got '0'");
  expect_usage_error({"--mode", "z"}, "unknown mode 'z'");
}

TEST(Flags, UnknownAndMissingAreUsageErrors) {
  expect_usage_error({"--colour", "3"}, "unknown flag '--colour'");
  expect_usage_error({"stray"}, "unexpected argument 'stray'");
  expect_usage_error({"--count"}, "--count needs a value");
}

TEST(Flags, ParseKnownHandsOnWhatItDoesNotKnow) {
  Example e;
  const char* argv[] = {"example", "--benchmark_filter=x", "--count=4", "--benchmark_out", "f.json"};
  std::vector<std::string> rest = e.p.parse_known(5, argv, nullptr);
  EXPECT_EQ(e.v.count, 4);
  EXPECT_EQ(rest, (std::vector<std::string>{"--benchmark_filter=x", "--benchmark_out", "f.json"}));
}

TEST(Flags, HelpListsEveryFlagWithItsTextInGroups) {
  Example e;
  EXPECT_EXIT(e.parse({"--help"}), ::testing::ExitedWithCode(0), "");
  const std::string help = e.p.help();
  EXPECT_EQ(help.rfind("usage: example [flags]\n\nParses flags for the test.\n", 0), 0u) << help;
  for (const char* s :
       {"--name NAME", "a name\n", "over two lines", "--count N", "a count (default 7)", "--seed S",
        "more:", "--rate X", "--sizes LIST", "--kinds LIST", "--fast", "go fast", "--mode M", "x or y", "The end."})
    EXPECT_NE(help.find(s), std::string::npos) << s << " missing from\n" << help;
  EXPECT_LT(help.find("flags:"), help.find("more:"));
  EXPECT_LT(help.find("--fast"), help.find("--help"));  // --help comes last
}

}  // namespace
}  // namespace tandem
