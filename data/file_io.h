// File helpers for the readers: whole-file reads (gzip detected by its magic), positioned reads, CRC-32.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "runtime/base/non_copyable.h"

namespace tandem {
namespace data {

bool path_exists(const std::string& path);
bool is_directory(const std::string& path);
// Entries of a directory (names only, sorted); throws IoError when it cannot be listed.
std::vector<std::string> list_directory(const std::string& path);
std::string join_path(const std::string& dir, const std::string& name);

// The bytes of a file; gzip-compressed files (magic 1f 8b) are decompressed. Throws IoError naming the
// file when it is missing, unreadable or a corrupt/truncated gzip stream.
std::vector<uint8_t> read_file(const std::string& path);

// A read-only file for positioned reads from many threads at once (pread: no shared file position).
class RandomAccessFile : NonCopyable {
 public:
  explicit RandomAccessFile(const std::string& path);  // throws IoError when it cannot be opened
  ~RandomAccessFile();
  uint64_t size() const { return size_; }
  const std::string& path() const { return path_; }
  // Reads exactly n bytes at `offset`; a short read (a file truncated since it was opened) throws IoError.
  void read(uint64_t offset, void* dst, size_t n) const;

 private:
  std::string path_;
  int fd_ = -1;
  uint64_t size_ = 0;
};

uint32_t crc32_of(const void* data, size_t n, uint32_t crc = 0);

}  // namespace data
}  // namespace tandem
