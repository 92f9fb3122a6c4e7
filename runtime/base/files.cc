// File-system helpers.
#include "runtime/base/files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/base/error.h"

namespace tandem {

void make_dirs(const std::string& path) {
  TD_CHECK(!path.empty(), "make_dirs: empty path");
  for (size_t pos = 1; pos <= path.size(); ++pos) {
    if (pos != path.size() && path[pos] != '/') continue;
    const std::string part = path.substr(0, pos);
    if (::mkdir(part.c_str(), 0755) == 0 || errno == EEXIST) continue;
    TD_THROW(IoError, "cannot create the folder ", part, ": ", std::strerror(errno));
  }
  struct stat st {};
  TD_CHECK_IO(::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode), path, " exists but is not a folder");
}

void write_text(const std::string& path, const std::string& text) {
  // A temporary name of this process and call alone: two writers of one path (threads or processes) never
  // write into the same temporary file, so the renamed file is always one writer's whole text.
  static std::atomic<uint64_t> calls{0};
  const std::string tmp = path + ".tmp." + std::to_string(::getpid()) + "." + std::to_string(++calls);
  bool written;
  {
    std::ofstream f(tmp);
    f << text << "\n";
    written = f.good();
  }
  if (!written || std::rename(tmp.c_str(), path.c_str()) != 0) {
    const std::string why = std::strerror(errno);
    std::remove(tmp.c_str());
    TD_THROW(IoError, "cannot write ", path, " (through ", tmp, "): ", why);
  }
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  TD_CHECK_IO(f.good(), "cannot read ", path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace tandem
