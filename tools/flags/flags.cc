// tools/flags: the programs' flag parser on CLI11 (the only file that includes it, so that one object pays
// for its header), with the project's value parsing, help layout and usage errors.
#include "tools/flags/flags.h"

#include <CLI/CLI.hpp>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <sstream>

#include "runtime/base/error.h"

namespace tandem {
namespace flags {
namespace {

// A bad value: its message becomes the usage error.
struct BadValue {
  std::string message;
};

std::string shortest(double x) {
  std::ostringstream s;
  s << x;
  return s.str();
}

int64_t to_integer(const std::string& name, const std::string& v, int64_t min, int64_t max) {
  errno = 0;
  char* end = nullptr;
  const long long x = std::strtoll(v.c_str(), &end, 10);
  // No lower bound to name when the flag takes any int: its range is checked where it is used.
  const std::string range = min <= std::numeric_limits<int>::min() ? "" : " >= " + std::to_string(min);
  if (v.empty() || *end != '\0' || errno == ERANGE || x < min)
    throw BadValue{name + " needs an integer" + range + ", got '" + v + "'"};
  if (x > max) throw BadValue{name + " needs an integer of at most " + std::to_string(max) + ", got '" + v + "'"};
  return x;
}

double to_number(const std::string& name, const std::string& v, double min) {
  char* end = nullptr;
  const double x = std::strtod(v.c_str(), &end);
  if (v.empty() || *end != '\0' || !(x >= min))  // !(x >= min) also catches NaN
    throw BadValue{name + " needs a number >= " + shortest(min) + ", got '" + v + "'"};
  return x;
}

std::vector<std::string> split(const std::string& list) {
  std::vector<std::string> items;
  std::stringstream s(list);
  std::string item;
  while (std::getline(s, item, ',')) items.push_back(item);
  return items;
}

// --help: "usage: ...", the paragraphs about the program, the groups of flags (a blank line before each) and the
// footer.
class HelpLayout : public CLI::Formatter {
 public:
  HelpLayout(std::string usage, std::string about) : usage_(std::move(usage)), about_(std::move(about)) {}
  std::string make_help(const CLI::App* app, std::string, CLI::AppFormatMode mode) const override {
    std::string out = "usage: " + usage_ + "\n";
    if (!about_.empty()) out += "\n" + about_ + "\n";
    out += "\n" + make_groups(app, mode);  // it puts a newline between groups
    if (!app->get_footer().empty()) out += "\n" + app->get_footer() + "\n";
    return out;
  }
  std::string make_group(std::string title, bool positional, std::vector<const CLI::Option*> opts) const override {
    std::string out = title + ":\n";
    for (const CLI::Option* opt : opts) out += make_option(opt, positional);
    return out;
  }

 private:
  std::string usage_, about_;
};

// The program's name and usage line, for usage_error (set by the latest Parser).
struct CommandLine {
  std::string program = "tandem", usage;
};
CommandLine& command_line() {
  static CommandLine c;
  return c;
}

}  // namespace

struct Parser::Impl {
  CLI::App app;
  std::shared_ptr<HelpLayout> layout;
  size_t widest = 11;  // the longest "  --name VALUE" so far (at least "  -h,--help")

  Impl(std::string usage, std::string about)
      : layout(std::make_shared<HelpLayout>(std::move(usage), std::move(about))) {
    app.formatter(layout);
    app.option_defaults()->group("flags")->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
    app.allow_extras(true);  // unknown arguments are reported (or handed on) by Parser, in its words
    app.set_help_flag();     // added last, by run(), to be listed last
  }

  // Declares a flag whose value `apply` takes.
  void add(const std::string& name, const std::string& value, std::function<void(const std::string&)> apply,
           const std::string& help) {
    app.add_option_function<std::string>(name, std::move(apply), help)->option_text(value);
    widest = std::max(widest, name.size() + value.size() + 3);
  }

  std::vector<std::string> run(int argc, const char* const* argv, const std::function<void()>& after_help) {
    app.set_help_flag("-h,--help", "this text");
    layout->column_width(std::min<size_t>(widest + 2, 30));
    try {
      app.parse(argc, argv);
    } catch (const CLI::CallForHelp&) {
      std::fputs(app.help().c_str(), stdout);
      if (after_help) after_help();
      std::exit(0);
    } catch (const CLI::ArgumentMismatch& e) {
      // CLI11 says "<flag>: 1 required <VALUE> missing" for a flag at the end of the line without its value.
      const std::string what = e.what();
      const size_t colon = what.find(':');
      usage_error(what.find("missing") != std::string::npos && colon != std::string::npos
                      ? what.substr(0, colon) + " needs a value"
                      : what);
    } catch (const CLI::ParseError& e) {
      usage_error(e.what());
    } catch (const BadValue& e) {
      usage_error(e.message);
    } catch (const Error& e) {
      usage_error(e.message());
    }
    return app.remaining();
  }
};

Parser::Parser(std::string program, std::string usage, std::string about) {
  command_line() = {std::move(program), usage};
  impl_ = std::make_unique<Impl>(std::move(usage), std::move(about));
}

Parser::~Parser() = default;

void Parser::group(const std::string& title) { impl_->app.option_defaults()->group(title); }

void Parser::footer(const std::string& text) { impl_->app.footer(text); }

void Parser::text(const std::string& name, const std::string& value, std::string* out, const std::string& help) {
  impl_->add(
      name, value, [out](const std::string& v) { *out = v; }, help);
}

void Parser::integer(const std::string& name, const std::string& value, int64_t* out, const std::string& help,
                     int64_t min) {
  impl_->add(
      name, value, [=](const std::string& v) { *out = to_integer(name, v, min, std::numeric_limits<int64_t>::max()); },
      help);
}

void Parser::integer(const std::string& name, const std::string& value, int* out, const std::string& help,
                     int64_t min) {
  impl_->add(
      name, value,
      [=](const std::string& v) { *out = static_cast<int>(to_integer(name, v, min, std::numeric_limits<int>::max())); },
      help);
}

void Parser::integer(const std::string& name, const std::string& value, uint64_t* out, const std::string& help) {
  impl_->add(
      name, value,
      [=](const std::string& v) {
        *out = static_cast<uint64_t>(to_integer(name, v, 0, std::numeric_limits<int64_t>::max()));
      },
      help);
}

void Parser::number(const std::string& name, const std::string& value, double* out, const std::string& help,
                    double min) {
  impl_->add(
      name, value, [=](const std::string& v) { *out = to_number(name, v, min); }, help);
}

void Parser::integers(const std::string& name, const std::string& value, std::vector<int64_t>* out,
                      const std::string& help, int64_t min) {
  impl_->add(
      name, value,
      [=](const std::string& v) {
        out->clear();
        for (const std::string& item : split(v))
          out->push_back(to_integer(name, item, min, std::numeric_limits<int64_t>::max()));
        if (out->empty()) throw BadValue{name + " needs a comma-separated list of integers, got '" + v + "'"};
      },
      help);
}

void Parser::words(const std::string& name, const std::string& value, std::vector<std::string>* out,
                   const std::string& help) {
  impl_->add(
      name, value,
      [=](const std::string& v) {
        *out = split(v);
        if (out->empty()) throw BadValue{name + " needs a comma-separated list, got '" + v + "'"};
      },
      help);
}

void Parser::flag(const std::string& name, bool* out, bool when_given, const std::string& help) {
  impl_->app.add_flag_callback(
      name, [=] { *out = when_given; }, help);
  impl_->widest = std::max(impl_->widest, name.size() + 2);
}

void Parser::custom(const std::string& name, const std::string& value, std::function<void(const std::string&)> apply,
                    const std::string& help) {
  impl_->add(name, value, std::move(apply), help);
}

void Parser::parse(int argc, const char* const* argv) {
  const std::vector<std::string> rest = impl_->run(argc, argv, nullptr);
  if (!rest.empty())
    fail(rest[0].rfind("-", 0) == 0 ? "unknown flag '" + rest[0] + "'" : "unexpected argument '" + rest[0] + "'");
}

std::vector<std::string> Parser::parse_known(int argc, const char* const* argv,
                                             const std::function<void()>& after_help) {
  return impl_->run(argc, argv, after_help);
}

std::string Parser::help() const { return impl_->app.help(); }

void Parser::fail(const std::string& message) const { usage_error(message); }

void usage_error(const std::string& message) {
  const CommandLine& c = command_line();
  std::fprintf(stderr, "%s: %s\n", c.program.c_str(), message.c_str());
  if (!c.usage.empty()) std::fprintf(stderr, "usage: %s\n", c.usage.c_str());
  std::fprintf(stderr, "(run %s --help for the flags)\n", c.program.c_str());
  std::exit(2);
}

int run_reporting_errors(const char* program, const std::function<int()>& work) {
  try {
    return work();
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
    return 1;
  }
}

}  // namespace flags
}  // namespace tandem
