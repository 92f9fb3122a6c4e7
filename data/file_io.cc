// File helpers: whole-file and gzip reads, pread-based random access, CRC-32 (zlib's).
#include "data/file_io.h"

#include <dirent.h>
#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>
#include <zlib.h>

#include <algorithm>
#include <cerrno>
#include <climits>
#include <cstring>

#include "runtime/base/error.h"

namespace tandem {
namespace data {

bool path_exists(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0;
}

bool is_directory(const std::string& path) {
  struct stat st;
  return ::stat(path.c_str(), &st) == 0 && S_ISDIR(st.st_mode);
}

std::vector<std::string> list_directory(const std::string& path) {
  DIR* dir = ::opendir(path.c_str());
  TD_CHECK_IO(dir != nullptr, "cannot list directory ", path, ": ", std::strerror(errno));
  std::vector<std::string> names;
  while (struct dirent* e = ::readdir(dir)) {
    std::string name = e->d_name;
    if (name != "." && name != "..") names.push_back(name);
  }
  ::closedir(dir);
  std::sort(names.begin(), names.end());
  return names;
}

std::string join_path(const std::string& dir, const std::string& name) {
  if (dir.empty() || dir.back() == '/') return dir + name;
  return dir + "/" + name;
}

namespace {

std::vector<uint8_t> read_raw(const std::string& path) {
  RandomAccessFile f(path);
  std::vector<uint8_t> bytes(f.size());
  f.read(0, bytes.data(), bytes.size());
  return bytes;
}

// Inflates every gzip member of `in` (concatenated members are legal gzip).
std::vector<uint8_t> gunzip(const std::vector<uint8_t>& in, const std::string& path) {
  std::vector<uint8_t> out;
  out.reserve(in.size() * 4);
  z_stream zs;
  std::memset(&zs, 0, sizeof(zs));
  TD_CHECK_IO(inflateInit2(&zs, 15 + 32) == Z_OK, "cannot initialize zlib to read ", path);
  zs.next_in = const_cast<Bytef*>(in.data());
  zs.avail_in = static_cast<uInt>(std::min<size_t>(in.size(), UINT_MAX));
  size_t consumed_before = 0;
  int rc = Z_OK;
  for (;;) {
    if (out.size() == out.capacity()) out.reserve(out.capacity() * 2 + 65536);
    size_t have = out.size();
    out.resize(out.capacity());
    zs.next_out = out.data() + have;
    zs.avail_out = static_cast<uInt>(std::min<size_t>(out.size() - have, UINT_MAX));
    size_t avail_before = zs.avail_out;
    rc = inflate(&zs, Z_NO_FLUSH);
    out.resize(have + (avail_before - zs.avail_out));
    if (rc == Z_STREAM_END) {
      consumed_before += zs.total_in;
      // Another gzip member may follow; anything else after the end is ignored, as gzip does.
      if (consumed_before + 2 > in.size() || in[consumed_before] != 0x1f || in[consumed_before + 1] != 0x8b) break;
      inflateReset(&zs);
      zs.next_in = const_cast<Bytef*>(in.data() + consumed_before);
      zs.avail_in = static_cast<uInt>(std::min<size_t>(in.size() - consumed_before, UINT_MAX));
      continue;
    }
    if (rc != Z_OK) break;
    if (zs.avail_in == 0 && zs.avail_out != 0) {
      rc = Z_BUF_ERROR;  // input ended inside the stream
      break;
    }
  }
  std::string msg = zs.msg ? zs.msg : "";
  inflateEnd(&zs);
  if (rc == Z_BUF_ERROR) TD_THROW(IoError, path, ": truncated gzip stream (the file ends before its data does)");
  TD_CHECK_IO(rc == Z_STREAM_END, path, ": corrupt gzip data", msg.empty() ? "" : " (" + msg + ")");
  return out;
}

}  // namespace

std::vector<uint8_t> read_file(const std::string& path) {
  std::vector<uint8_t> bytes = read_raw(path);
  if (bytes.size() >= 2 && bytes[0] == 0x1f && bytes[1] == 0x8b) return gunzip(bytes, path);
  return bytes;
}

RandomAccessFile::RandomAccessFile(const std::string& path) : path_(path) {
  fd_ = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  TD_CHECK_IO(fd_ >= 0, "cannot open ", path, ": ", std::strerror(errno));
  struct stat st;
  if (::fstat(fd_, &st) != 0 || !S_ISREG(st.st_mode)) {
    ::close(fd_);
    fd_ = -1;
    TD_THROW(IoError, "cannot open ", path, ": not a regular file");
  }
  size_ = static_cast<uint64_t>(st.st_size);
}

RandomAccessFile::~RandomAccessFile() {
  if (fd_ >= 0) ::close(fd_);
}

void RandomAccessFile::read(uint64_t offset, void* dst, size_t n) const {
  auto* p = static_cast<char*>(dst);
  size_t done = 0;
  while (done < n) {
    ssize_t r = ::pread(fd_, p + done, n - done, static_cast<off_t>(offset + done));
    if (r < 0 && errno == EINTR) continue;
    TD_CHECK_IO(r >= 0, "cannot read ", path_, " at byte ", offset + done, ": ", std::strerror(errno));
    TD_CHECK_IO(r > 0, path_, ": truncated (needed bytes ", offset, "..", offset + n, ", the file ends at ",
                offset + done, ")");
    done += static_cast<size_t>(r);
  }
}

uint32_t crc32_of(const void* data, size_t n, uint32_t crc) {
  const auto* p = static_cast<const Bytef*>(data);
  uLong c = crc;
  while (n > 0) {
    uInt chunk = static_cast<uInt>(std::min<size_t>(n, 1u << 30));
    c = ::crc32(c, p, chunk);
    p += chunk;
    n -= chunk;
  }
  return static_cast<uint32_t>(c);
}

}  // namespace data
}  // namespace tandem
