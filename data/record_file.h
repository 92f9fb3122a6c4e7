// Packed record shards (".tdrec"): tools:pack writes them, open_dataset("packed:PATH") reads them.
//
// A dataset is stored as shards PREFIX-SSSSS-of-NNNNN.tdrec (S = 0..N-1), records split contiguously.
// Every shard stands alone; all integers are little-endian.
//
//   header, 48 bytes
//     0  char[8] magic        "TDMRECS1"
//     8  u32     version      1
//    12  u32     shard_index
//    16  u32     shard_count
//    20  u32     num_classes
//    24  u64     record_count
//    32  u64     index_offset  (where the index section starts)
//    40  u32     reserved      0
//    44  u32     header_crc    CRC-32 of bytes 0..43
//   payloads, back to back from byte 48
//   index section at index_offset
//     record_count entries of 32 bytes:
//        u64 offset, u32 length, u32 payload_crc (CRC-32 of the payload), u32 label,
//        u32 height, u32 width, u8 channels, u8 encoding (0 raw HWC u8, 1 JPEG, 2 PNG), u16 reserved 0
//     u32 class_name_count, then per name: u32 byte length, the UTF-8 bytes (may be 0 names)
//     u32 index_crc           CRC-32 of the index section up to here
//   the file ends right after index_crc.
//
// Opening a shard reads and checks its header and index (magic, version, checksums, every entry's bounds and
// label), so get(i) is one pread of the payload plus a checksum: fast random access, and a corrupt or
// truncated record is reported with the file and record rather than decoded into garbage.
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "runtime/base/non_copyable.h"

namespace tandem {
namespace data {

enum class RecordEncoding : uint8_t { Raw = 0, Jpeg = 1, Png = 2 };

struct RecordEntry {
  uint64_t offset = 0;
  uint32_t length = 0;
  uint32_t crc = 0;
  uint32_t label = 0;
  uint32_t height = 0, width = 0;
  uint8_t channels = 0;
  RecordEncoding encoding = RecordEncoding::Raw;
};

// Writes one shard. The file appears under its name only once finish() succeeds (written as NAME.tmp first).
class RecordWriter : NonCopyable {
 public:
  RecordWriter(const std::string& path, uint32_t shard_index, uint32_t shard_count, uint32_t num_classes,
               std::vector<std::string> class_names = {});
  ~RecordWriter();  // removes the temporary file unless finished

  // Appends a record: raw HWC pixels (payload size height * width * channels) or an encoded image.
  void add(const uint8_t* payload, size_t size, int64_t label, int64_t height, int64_t width, int64_t channels,
           RecordEncoding encoding);
  void add(const Image& image, int64_t label);  // raw
  void finish();
  uint64_t bytes() const { return offset_; }

 private:
  void write(const void* data, size_t size);
  std::string path_, tmp_;
  std::FILE* file_ = nullptr;
  uint32_t shard_index_, shard_count_, num_classes_;
  std::vector<std::string> class_names_;
  std::vector<RecordEntry> entries_;
  uint64_t offset_ = 0;
  bool finished_ = false;
};

// The shard file name for a prefix: PREFIX-00002-of-00008.tdrec.
std::string shard_path(const std::string& prefix, int64_t index, int64_t count);

// The dataset of all shards of a prefix (every PREFIX-*-of-N.tdrec must be present), or of one .tdrec file.
// `path` may also be a directory holding train-*.tdrec (train) and val-*.tdrec or test-*.tdrec (test).
std::shared_ptr<Dataset> open_packed(const std::string& path, bool train);

}  // namespace data
}  // namespace tandem
