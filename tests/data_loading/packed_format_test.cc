// The packed-record reader against shards corrupted field by field (checksums recomputed where a buggy writer
// would have written them): every check of the reader is reached and names the file, record and field.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/record_file.h"
#include "runtime/base/error.h"
#include "tests/data_loading/dataset_files.h"
#include "tests/testing.h"

namespace tandem {
namespace data {
namespace {

using Bytes = std::vector<uint8_t>;

// Byte positions from the layout documented in data/record_file.h.
constexpr size_t kVersion = 8, kShardIndex = 12, kNumClasses = 20, kRecords = 24, kIndexOffset = 32;
constexpr size_t kEntry = 32;
constexpr size_t kOffset = 0, kLength = 8, kLabel = 16, kHeight = 20, kWidth = 24, kChannels = 28, kEncoding = 29;

uint32_t crc(const Bytes& b, size_t begin, size_t end) {
  return static_cast<uint32_t>(::crc32(0, b.data() + begin, static_cast<uInt>(end - begin)));
}
void put32(Bytes& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
void put64(Bytes& b, size_t at, uint64_t v) {
  put32(b, at, static_cast<uint32_t>(v));
  put32(b, at + 4, static_cast<uint32_t>(v >> 32));
}
uint64_t get64(const Bytes& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[at + i];
  return v;
}

// A one-shard file: record 0 raw gray 2x3, record 1 a PNG of 5x6x3; 2 classes, named "a" and "b" when `names`.
struct Shard {
  std::string dir, path;
  Bytes good;
  size_t index = 0;  // where the index section starts
  size_t entry(int record) const { return index + kEntry * static_cast<size_t>(record); }
};

Shard write_shard(bool names, uint64_t seed) {
  Shard s;
  s.dir = testdata::make_temp_dir("packed-format");
  s.path = s.dir + "/x.tdrec";
  {
    RecordWriter w(s.path, 0, 1, 2, names ? std::vector<std::string>{"a", "b"} : std::vector<std::string>{});
    w.add(testdata::smooth_image(2, 3, 1, seed), 0);
    Bytes png = testdata::encode_png(testdata::smooth_image(5, 6, 3, seed + 1));
    w.add(png.data(), png.size(), 1, 5, 6, 3, RecordEncoding::Png);
    w.finish();
  }
  s.good = testdata::read_bytes(s.path);
  s.index = static_cast<size_t>(get64(s.good, kIndexOffset));
  return s;
}

void fix_header_crc(Bytes& b) { put32(b, 44, crc(b, 0, 44)); }
void fix_index_crc(Bytes& b, size_t index) { put32(b, b.size() - 4, crc(b, index, b.size() - 4)); }

// Writes `bytes` as the shard, opens it and reads every record; expects an E whose message has every part.
template <typename E = IoError>
void expect_refused(const Shard& s, const Bytes& bytes, const std::vector<std::string>& parts) {
  testdata::write_file(s.path, bytes);
  testing::expect_error<E>(
      [&] {
        auto ds = open_dataset("packed:" + s.path, true);
        for (int64_t i = 0; i < ds->size(); ++i) ds->get(i);
      },
      parts);
}

TEST(PackedFormat, TheGoodShardReads) {
  Shard s = write_shard(true, testing::fresh_seed());
  auto ds = open_dataset("packed:" + s.path, true);
  ASSERT_EQ(ds->size(), 2);
  EXPECT_EQ(ds->get(1).image.height, 5);
}

TEST(PackedFormat, HeaderFields) {
  Shard s = write_shard(true, testing::fresh_seed());
  Bytes b = s.good;
  put32(b, kVersion, 2);
  fix_header_crc(b);
  expect_refused(s, b, {s.path, "record format version 2", "reads version 1"});

  b = s.good;
  put32(b, kShardIndex, 1);  // shard 1 of 1
  fix_header_crc(b);
  expect_refused(s, b, {s.path, "corrupt header (shard 1 of 1"});

  b = s.good;
  put32(b, kNumClasses, 0);
  fix_header_crc(b);
  expect_refused(s, b, {s.path, "corrupt header", "0 classes"});

  b = s.good;
  put64(b, kIndexOffset, b.size() + 1);
  fix_header_crc(b);
  expect_refused(s, b, {s.path, "the header places 2 index entries at byte " + std::to_string(b.size() + 1)});

  b = s.good;
  put64(b, kRecords, uint64_t{1} << 60);
  fix_header_crc(b);
  expect_refused(s, b, {s.path, "the header places 1152921504606846976 index entries"});

  b = s.good;
  put32(b, kNumClasses, 3);  // two names for three classes
  fix_header_crc(b);
  expect_refused(s, b, {s.path, "2 class names for 3 classes"});
}

TEST(PackedFormat, IndexStructure) {
  Shard bare = write_shard(false, testing::fresh_seed());  // index: 2 entries, 0 names, checksum
  Bytes b = bare.good;
  b.resize(b.size() - 2);
  expect_refused(bare, b, {bare.path, "truncated index"});

  // Index with names: entries, u32 2, u32 1 "a", u32 1 "b", checksum.
  Shard s = write_shard(true, testing::fresh_seed());
  const size_t names = s.entry(2), second_len = names + 4 + 4 + 1;
  b = s.good;
  put32(b, names, 3);
  put32(b, second_len, 4);  // "b" and three bytes of the checksum: no room for a third length
  expect_refused(s, b, {s.path, "truncated class name list"});

  b = s.good;
  put32(b, second_len, 100);
  expect_refused(s, b, {s.path, "truncated class name list"});

  b = s.good;
  put32(b, names, 1);
  expect_refused(s, b, {s.path, "truncated or corrupt index (9 bytes where a 4-byte checksum should end the file)"});
}

TEST(PackedFormat, EntryFields) {
  Shard s = write_shard(true, testing::fresh_seed());
  auto entry_changed = [&](int record, size_t field, uint64_t value, int width) {
    Bytes b = s.good;
    const size_t at = s.entry(record) + field;
    if (width == 8)
      put64(b, at, value);
    else if (width == 4)
      put32(b, at, static_cast<uint32_t>(value));
    else
      b[at] = static_cast<uint8_t>(value);
    fix_index_crc(b, s.index);
    return b;
  };
  expect_refused(s, entry_changed(0, kOffset, s.index, 8), {s.path, "record 0 lies outside the payload area"});
  expect_refused(s, entry_changed(0, kOffset, 20, 8), {s.path, "record 0 lies outside the payload area"});
  // offset + length wraps past 2^64 to a small number: still outside.
  expect_refused(s, entry_changed(1, kOffset, ~uint64_t{0} - 3, 8), {s.path, "record 1 lies outside"});
  expect_refused(s, entry_changed(1, kLabel, 2, 4), {s.path, "record 1 has label 2, outside [0, 2)"});
  expect_refused(s, entry_changed(1, kEncoding, 7, 1), {s.path, "record 1 has unknown encoding 7"});
  expect_refused(s, entry_changed(0, kHeight, 0, 4), {s.path, "record 0 has image size 0x3x1"});
  expect_refused(s, entry_changed(1, kChannels, 2, 1), {s.path, "record 1 has image size 5x6x2"});
  expect_refused(s, entry_changed(0, kWidth, 4, 4), {s.path, "record 0 holds 6 raw bytes for a 2x4x1 image"});
  {
    // (2^32 - 1)^2 * 3 overflows 64 bits: refused as such, not compared modulo 2^64.
    Bytes b = s.good;
    put32(b, s.entry(0) + kHeight, 0xFFFFFFFFu);
    put32(b, s.entry(0) + kWidth, 0xFFFFFFFFu);
    b[s.entry(0) + kChannels] = 3;
    fix_index_crc(b, s.index);
    expect_refused(s, b, {s.path, "record 0 image size", "does not fit in 64 bits"});
  }
  // The PNG decodes to 5x6, the index says 4x6.
  expect_refused(s, entry_changed(1, kHeight, 4, 4), {s.path + " record 1", "decodes to 5x6 but the index says 4x6"});
  // A length that no longer covers the payload: the payload's checksum no longer matches.
  expect_refused(s, entry_changed(1, kLength, 10, 4), {s.path + " record 1", "checksum"});
}

TEST(PackedFormat, ShardSets) {
  const uint64_t seed = testing::fresh_seed();
  const std::string dir = testdata::make_temp_dir("packed-sets");
  auto write = [&](const std::string& path, uint32_t index, uint32_t count, std::vector<std::string> names) {
    RecordWriter w(path, index, count, 2, names);
    w.add(testdata::smooth_image(2, 2, 3, seed + index), index % 2);
    w.finish();
  };
  const std::string prefix = dir + "/train";
  write(shard_path(prefix, 0, 2), 0, 2, {"a", "b"});
  write(shard_path(prefix, 1, 2), 0, 2, {"a", "b"});  // says it is shard 0
  auto expect = [&](const std::vector<std::string>& parts) {
    try {
      auto ds = open_dataset("packed:" + prefix, true);
      for (int64_t i = 0; i < ds->size(); ++i) ds->get(i);
      ADD_FAILURE() << "accepted; expected " << parts.back();
    } catch (const IoError& e) {
      for (const std::string& p : parts)
        EXPECT_NE(std::string(e.what()).find(p), std::string::npos) << "message: " << e.what() << "\nmissing: " << p;
    }
  };
  expect({shard_path(prefix, 1, 2), "claims to be shard 0 of 2, but is file 1 of 2"});

  write(shard_path(prefix, 1, 2), 1, 2, {"a", "c"});
  expect({shard_path(prefix, 1, 2), "its classes differ from those of " + shard_path(prefix, 0, 2)});

  write(shard_path(prefix, 1, 2), 1, 2, {"a", "b"});
  auto ds = open_dataset("packed:" + prefix, true);
  ASSERT_EQ(ds->size(), 2);
  EXPECT_THROW(ds->get(2), IndexError);

  write(shard_path(prefix, 2, 3), 2, 3, {"a", "b"});
  expect({"packed " + prefix, "shards disagree on the shard count"});
  std::remove(shard_path(prefix, 2, 3).c_str());

  try {
    open_dataset("packed:" + dir + "/nothing", true);
    ADD_FAILURE() << "a prefix without shards was accepted";
  } catch (const IoError& e) {
    EXPECT_NE(std::string(e.what()).find("no shards " + dir + "/nothing-NNNNN-of-NNNNN.tdrec"), std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace data
}  // namespace tandem
