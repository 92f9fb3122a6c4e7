// The command lines of Tandem's programs: flags declared once (name, value, help text, bounds) and parsed by
// CLI11, with one usage convention: --help prints the text and exits 0; an unknown flag, a missing value or a
// bad one prints "<program>: <what is wrong>", the usage line and a pointer to --help, and exits 2.
#pragma once

#include <cstdint>
#include <functional>
#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace tandem {
namespace flags {

class Parser {
 public:
  // `usage`: what --help and usage errors print after "usage: " (the program's name first); `about`: the
  // paragraphs --help prints after it. The program's one parser: usage_error() speaks for it.
  Parser(std::string program, std::string usage, std::string about);
  ~Parser();
  Parser(const Parser&) = delete;
  Parser& operator=(const Parser&) = delete;

  // The flags declared after this are listed under `title` in --help (before the first call: "flags").
  void group(const std::string& title);
  // Text printed after the flags in --help.
  void footer(const std::string& text);

  // Each flag: `name` ("--batch"), `value` (its value's name in --help: N, X, SPEC...), where it goes, and `help`
  // (its explanation; '\n' starts a new line in the help column). Given twice, the last value counts.
  void text(const std::string& name, const std::string& value, std::string* out, const std::string& help);
  // A base-10 integer of at least `min`.
  void integer(const std::string& name, const std::string& value, int64_t* out, const std::string& help,
               int64_t min = std::numeric_limits<int64_t>::min());
  void integer(const std::string& name, const std::string& value, int* out, const std::string& help,
               int64_t min = std::numeric_limits<int>::min());
  void integer(const std::string& name, const std::string& value, uint64_t* out, const std::string& help);
  // A decimal number of at least `min` (never NaN).
  void number(const std::string& name, const std::string& value, double* out, const std::string& help, double min);
  // A comma-separated list of integers, each at least `min`; it replaces the default.
  void integers(const std::string& name, const std::string& value, std::vector<int64_t>* out, const std::string& help,
                int64_t min);
  // A comma-separated list of words; it replaces the default.
  void words(const std::string& name, const std::string& value, std::vector<std::string>* out, const std::string& help);
  // A flag without a value: sets *out to `when_given`.
  void flag(const std::string& name, bool* out, bool when_given, const std::string& help);
  // A value `apply` interprets; a tandem::Error it throws becomes a usage error with its message.
  void custom(const std::string& name, const std::string& value, std::function<void(const std::string&)> apply,
              const std::string& help);

  // Parses the arguments after argv[0] (exits as the file comment says).
  void parse(int argc, const char* const* argv);
  // As parse, but hands back the arguments it does not know, in order, for another parser (Google Benchmark's);
  // --help prints the text, then calls `after_help` (which may print more and exit) and exits 0.
  std::vector<std::string> parse_known(int argc, const char* const* argv, const std::function<void()>& after_help);
  // What --help prints.
  std::string help() const;
  // usage_error(message).
  [[noreturn]] void fail(const std::string& message) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Prints "<program>: <message>", the usage line and a pointer to --help to stderr and exits 2: a usage or
// configuration error, also one found after parsing (program and usage: the latest Parser's).
[[noreturn]] void usage_error(const std::string& message);

// Runs a program's work and returns its exit status; an exception escaping the work prints
// "<program>: <what()>" to stderr and makes the status 1 (a failure while running, not a usage error).
int run_reporting_errors(const char* program, const std::function<int()>& work);

}  // namespace flags
}  // namespace tandem
