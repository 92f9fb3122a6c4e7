// SpecReader and SpecKeys: the one reader of Tandem's small spec strings ("resnet18:cifar,width=16",
// "synthetic:n=64,h=8", "random-crop:pad=4", "step:30:0.1", "cuda:0-3/2"): items, key=value pairs, typed values
// (with parse_number.h's syntax) and one error format.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/error.h"

namespace tandem {

// One spec being read. Every error it raises is a ValueError reading
//   <what> '<spec>': <problem>[ (expected <usage>)]
// and a value of the wrong type or out of its bounds has the problem "<name> '<value>' is not <expectation>":
//   model spec 'resnet18:width=x': width 'x' is not an integer
class SpecReader {
 public:
  static constexpr int64_t kNoMin = std::numeric_limits<int64_t>::min();
  static constexpr int64_t kNoMax = std::numeric_limits<int64_t>::max();
  static constexpr double kInf = std::numeric_limits<double>::infinity();

  // `what` names the kind of spec in errors ("model spec"), `spec` is the text read (quoted in errors), `usage`
  // its grammar, added to every error when not empty.
  SpecReader(std::string what, std::string spec, std::string usage = "");

  const std::string& spec() const { return spec_; }
  // "NAME[:REST]": the text before the first ':' (all of it without one), whether there is a ':', what follows.
  std::string name() const;
  bool has_rest() const;
  std::string rest() const;

  // `text` split at each `sep`: "" has no items, and an empty item ("a,,b", "a,") is an error.
  std::vector<std::string> items(const std::string& text, char sep) const;

  // Positional values, called `name` in errors: an integer or a finite number within [min, max], a boolean (1,
  // true, 0 or false), or the value of `choices` named `value`.
  int64_t integer(const std::string& name, const std::string& value, int64_t min = kNoMin, int64_t max = kNoMax) const;
  double finite(const std::string& name, const std::string& value, double min = -kInf, double max = kInf) const;
  bool boolean(const std::string& name, const std::string& value) const;
  template <typename T>
  T choice(const std::string& name, const std::string& value,
           const std::vector<std::pair<std::string, T>>& choices) const {
    std::string names;
    for (const auto& c : choices) {
      if (c.first == value) return c.second;
      names += (names.empty() ? "" : ", ") + c.first;
    }
    not_a(name, value, "one of " + names);
  }

  // Throws the ValueError "<what> '<spec>': <parts...>[ (expected <usage>)]".
  template <typename... Args>
  [[noreturn]] void fail(const Args&... parts) const {
    raise(detail::concat(parts...));
  }
  // Throws the error of a value that is not `expectation`.
  [[noreturn]] void not_a(const std::string& name, const std::string& value, const std::string& expectation) const;

 private:
  [[noreturn]] void raise(const std::string& problem) const;
  std::string what_, spec_, usage_;
};

// The key=value items after a spec's name ("NAME:k=v,k=v", or "NAME:k=v:k=v" with ':' between items), read by
// typed getters: each returns `fallback` when its key is absent, the last of repeated keys counts, and finish()
// refuses a key no getter asked for.
class SpecKeys {
 public:
  // The items of reader.rest() separated by `sep`: none without a ':' ("NAME:" has one, empty: an error). The
  // reader must outlive the keys.
  SpecKeys(const SpecReader& reader, char sep);

  // The first item when it has no '=' ("normalize:cifar10"), taken out of the keys; "" when there is none.
  std::string take_positional();

  bool has(const std::string& key) const;
  int64_t integer(const std::string& key, int64_t fallback, int64_t min = SpecReader::kNoMin,
                  int64_t max = SpecReader::kNoMax);
  double finite(const std::string& key, double fallback, double min = -SpecReader::kInf, double max = SpecReader::kInf);
  bool flag(const std::string& key, bool fallback);  // the key alone means true
  std::string text(const std::string& key, const std::string& fallback);
  template <typename T>
  T choice(const std::string& key, T fallback, const std::vector<std::pair<std::string, T>>& choices) {
    const Item* it = find(key);
    return it ? reader_.choice(key, it->value, choices) : fallback;
  }

  // Throws "unknown key 'k' (known: ...)" for the first key that no getter asked for.
  void finish() const;

 private:
  struct Item {
    std::string key, value;
    bool has_value = false;
  };
  // The last item of `key` (now a known key), or nullptr; one without '=' is an error unless `bare_ok`.
  const Item* find(const std::string& key, bool bare_ok = false);

  const SpecReader& reader_;
  std::vector<Item> items_;
  std::vector<std::string> known_;
};

}  // namespace tandem
