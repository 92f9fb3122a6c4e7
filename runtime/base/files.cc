// File-system helpers.
#include "runtime/base/files.h"

#include <sys/stat.h>

#include <cerrno>
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
  const std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp);
    f << text << "\n";
    TD_CHECK_IO(f.good(), "cannot write ", tmp);
  }
  TD_CHECK_IO(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename ", tmp, " to ", path);
}

std::string read_text(const std::string& path) {
  std::ifstream f(path);
  TD_CHECK_IO(f.good(), "cannot read ", path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

}  // namespace tandem
