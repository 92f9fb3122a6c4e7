// The disk cache of cuDNN convolution algorithm choices.
#include "kernels/cudnn/algo_cache.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <nlohmann/json.hpp>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/formats/json.h"

namespace tandem {
namespace cudnn {

namespace {

constexpr const char* kFileName = "cudnn-conv-algos.json";
constexpr const char* kFormat = "tandem cuDNN convolution algorithms";
constexpr int64_t kVersion = 1;

std::string entry_key(const AlgoContext& c, const std::string& problem) {
  return c.gpu + " | driver " + std::to_string(c.driver) + " | cuDNN " + std::to_string(c.cudnn) + " | " + problem;
}

std::string folder_of(const std::string& path) {
  const size_t slash = path.rfind('/');
  return slash == std::string::npos || slash == 0 ? std::string() : path.substr(0, slash);
}

}  // namespace

std::string default_algo_cache_path() {
  const char* off = std::getenv("TANDEM_CUDNN_CACHE");
  if (off != nullptr && std::strcmp(off, "0") == 0) return "";
  const char* dir = std::getenv("TANDEM_CACHE_DIR");
  if (dir != nullptr && dir[0] != '\0') return std::string(dir) + "/" + kFileName;
  const char* home = std::getenv("HOME");
  if (home != nullptr && home[0] != '\0') return std::string(home) + "/.cache/tandem/" + kFileName;
  return "";
}

AlgoDiskCache::AlgoDiskCache(std::string path, Warn warn) : path_(std::move(path)), warn_(std::move(warn)) {
  if (!warn_) warn_ = [](const std::string& why) { std::fprintf(stderr, "tandem: %s\n", why.c_str()); };
}

void AlgoDiskCache::warn_once(const std::string& why) {
  if (warned_) return;
  warned_ = true;
  warn_(why);
}

std::map<std::string, StoredAlgo> AlgoDiskCache::read_file() {
  std::map<std::string, StoredAlgo> out;
  struct stat st {};
  if (::stat(path_.c_str(), &st) != 0 && errno == ENOENT) return out;  // nothing kept yet
  try {
    const Json file = parse_json(read_text(path_));
    TD_CHECK(json_string(json_at(file, "format"), "format") == kFormat, "not a file of ", kFormat);
    TD_CHECK(json_int(json_at(file, "version"), "version") == kVersion, "version ",
             json_int(json_at(file, "version"), "version"), ", not ", kVersion);
    for (const auto& e : json_object(json_at(file, "entries"), "entries").items()) {
      StoredAlgo a;
      a.algo = static_cast<int>(json_int(json_at(e.value(), "algo"), "algo"));
      a.math = static_cast<int>(json_int(json_at(e.value(), "math"), "math"));
      out[e.key()] = a;
    }
  } catch (const Error& e) {
    warn_once("ignoring the cuDNN algorithm cache " + path_ + ": " + e.message());
    out.clear();
  }
  return out;
}

std::optional<StoredAlgo> AlgoDiskCache::lookup(const AlgoContext& context, const std::string& problem) {
  if (path_.empty()) return std::nullopt;
  std::lock_guard<std::mutex> lock(mu_);
  if (!loaded_) {
    entries_ = read_file();
    loaded_ = true;
  }
  auto it = entries_.find(entry_key(context, problem));
  if (it == entries_.end()) return std::nullopt;
  return it->second;
}

void AlgoDiskCache::store(const AlgoContext& context, const std::string& problem, StoredAlgo choice) {
  if (path_.empty()) return;
  std::lock_guard<std::mutex> lock(mu_);
  const std::string key = entry_key(context, problem);
  mine_[key] = choice;
  entries_[key] = choice;
  // What other processes wrote since, then this object's entries over them.
  std::map<std::string, StoredAlgo> all = read_file();
  for (const auto& e : mine_) all[e.first] = e.second;
  Json entries = Json::object();
  for (const auto& e : all) entries[e.first] = Json{{"algo", e.second.algo}, {"math", e.second.math}};
  const Json file = {{"format", kFormat}, {"version", kVersion}, {"entries", entries}};
  try {
    const std::string folder = folder_of(path_);
    if (!folder.empty()) make_dirs(folder);
    write_text(path_, dump_json(file, 1));
  } catch (const Error& e) {
    warn_once("cannot keep cuDNN algorithm choices in " + path_ + ": " + e.message());
  }
}

}  // namespace cudnn
}  // namespace tandem
