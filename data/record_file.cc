// Packed record shards: the writer, header/index validation, and the dataset over a set of shards.
#include "data/record_file.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <sstream>

#include "data/file_io.h"
#include "data/image_codec.h"
#include "runtime/base/checked_math.h"
#include "runtime/base/error.h"

namespace tandem {
namespace data {
namespace {

constexpr char kMagic[8] = {'T', 'D', 'M', 'R', 'E', 'C', 'S', '1'};
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderSize = 48;
constexpr size_t kEntrySize = 32;

void put32(std::vector<uint8_t>& b, uint32_t v) {
  for (int i = 0; i < 4; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
void put64(std::vector<uint8_t>& b, uint64_t v) {
  for (int i = 0; i < 8; ++i) b.push_back(static_cast<uint8_t>(v >> (8 * i)));
}
uint32_t get32(const uint8_t* p) {
  return static_cast<uint32_t>(p[0]) | (static_cast<uint32_t>(p[1]) << 8) | (static_cast<uint32_t>(p[2]) << 16) |
         (static_cast<uint32_t>(p[3]) << 24);
}
uint64_t get64(const uint8_t* p) {
  return static_cast<uint64_t>(get32(p)) | (static_cast<uint64_t>(get32(p + 4)) << 32);
}

std::vector<uint8_t> encode_header(uint32_t shard_index, uint32_t shard_count, uint32_t num_classes, uint64_t records,
                                   uint64_t index_offset) {
  std::vector<uint8_t> h(kMagic, kMagic + 8);
  put32(h, kVersion);
  put32(h, shard_index);
  put32(h, shard_count);
  put32(h, num_classes);
  put64(h, records);
  put64(h, index_offset);
  put32(h, 0);
  put32(h, crc32_of(h.data(), h.size()));
  return h;
}

}  // namespace

std::string shard_path(const std::string& prefix, int64_t index, int64_t count) {
  char buf[64];
  std::snprintf(buf, sizeof(buf), "-%05lld-of-%05lld.tdrec", static_cast<long long>(index),
                static_cast<long long>(count));
  return prefix + buf;
}

// ---- Writer ----

RecordWriter::RecordWriter(const std::string& path, uint32_t shard_index, uint32_t shard_count, uint32_t num_classes,
                           std::vector<std::string> class_names)
    : path_(path),
      tmp_(path + ".tmp"),
      shard_index_(shard_index),
      shard_count_(shard_count),
      num_classes_(num_classes),
      class_names_(std::move(class_names)) {
  TD_CHECK(shard_count > 0 && shard_index < shard_count, "RecordWriter: shard ", shard_index, " of ", shard_count);
  TD_CHECK(num_classes > 0, "RecordWriter: num_classes must be positive");
  TD_CHECK(class_names_.empty() || class_names_.size() == num_classes, "RecordWriter: ", class_names_.size(),
           " class names for ", num_classes, " classes");
  file_ = std::fopen(tmp_.c_str(), "wb");
  TD_CHECK_IO(file_ != nullptr, "cannot create ", tmp_, ": ", std::strerror(errno));
  std::vector<uint8_t> placeholder(kHeaderSize, 0);
  write(placeholder.data(), placeholder.size());
  offset_ = kHeaderSize;
}

RecordWriter::~RecordWriter() {
  if (file_ != nullptr) std::fclose(file_);
  if (!finished_) std::remove(tmp_.c_str());
}

void RecordWriter::write(const void* data, size_t size) {
  TD_CHECK_IO(std::fwrite(data, 1, size, file_) == size, "cannot write ", tmp_, ": ", std::strerror(errno));
}

void RecordWriter::add(const uint8_t* payload, size_t size, int64_t label, int64_t height, int64_t width,
                       int64_t channels, RecordEncoding encoding) {
  TD_CHECK(!finished_, "RecordWriter: add after finish");
  TD_CHECK(label >= 0 && label < num_classes_, "RecordWriter: label ", label, " outside [0, ", num_classes_, ")");
  TD_CHECK(height > 0 && width > 0 && height <= UINT32_MAX && width <= UINT32_MAX && (channels == 1 || channels == 3),
           "RecordWriter: bad image size ", height, "x", width, "x", channels);
  TD_CHECK(size <= UINT32_MAX, "RecordWriter: a record of ", size, " bytes is too large");
  if (encoding == RecordEncoding::Raw)
    TD_CHECK(static_cast<int64_t>(size) == height * width * channels, "RecordWriter: raw payload of ", size,
             " bytes for a ", height, "x", width, "x", channels, " image");
  RecordEntry e;
  e.offset = offset_;
  e.length = static_cast<uint32_t>(size);
  e.crc = crc32_of(payload, size);
  e.label = static_cast<uint32_t>(label);
  e.height = static_cast<uint32_t>(height);
  e.width = static_cast<uint32_t>(width);
  e.channels = static_cast<uint8_t>(channels);
  e.encoding = encoding;
  write(payload, size);
  offset_ += size;
  entries_.push_back(e);
}

void RecordWriter::add(const Image& image, int64_t label) {
  add(image.hwc.data(), image.hwc.size(), label, image.height, image.width, image.channels, RecordEncoding::Raw);
}

void RecordWriter::finish() {
  TD_CHECK(!finished_, "RecordWriter: finish called twice");
  std::vector<uint8_t> index;
  index.reserve(entries_.size() * kEntrySize + 64);
  for (const RecordEntry& e : entries_) {
    put64(index, e.offset);
    put32(index, e.length);
    put32(index, e.crc);
    put32(index, e.label);
    put32(index, e.height);
    put32(index, e.width);
    index.push_back(e.channels);
    index.push_back(static_cast<uint8_t>(e.encoding));
    index.push_back(0);
    index.push_back(0);
  }
  put32(index, static_cast<uint32_t>(class_names_.size()));
  for (const std::string& n : class_names_) {
    put32(index, static_cast<uint32_t>(n.size()));
    index.insert(index.end(), n.begin(), n.end());
  }
  put32(index, crc32_of(index.data(), index.size()));
  write(index.data(), index.size());
  std::vector<uint8_t> header = encode_header(shard_index_, shard_count_, num_classes_, entries_.size(), offset_);
  TD_CHECK_IO(std::fseek(file_, 0, SEEK_SET) == 0, "cannot seek in ", tmp_);
  write(header.data(), header.size());
  int rc = std::fclose(file_);
  file_ = nullptr;
  TD_CHECK_IO(rc == 0, "cannot write ", tmp_, ": ", std::strerror(errno));
  TD_CHECK_IO(std::rename(tmp_.c_str(), path_.c_str()) == 0, "cannot rename ", tmp_, " to ", path_, ": ",
              std::strerror(errno));
  finished_ = true;
}

// ---- Reader ----

namespace {

struct Shard {
  std::unique_ptr<RandomAccessFile> file;
  uint32_t shard_index = 0, shard_count = 0, num_classes = 0;
  std::vector<RecordEntry> entries;
  std::vector<std::string> class_names;
};

Shard open_shard(const std::string& path) {
  Shard s;
  s.file = std::make_unique<RandomAccessFile>(path);
  const uint64_t size = s.file->size();
  TD_CHECK_IO(size >= kHeaderSize, path, ": truncated (", size, " bytes, shorter than the ", kHeaderSize,
              "-byte header)");
  uint8_t h[kHeaderSize];
  s.file->read(0, h, kHeaderSize);
  TD_CHECK_IO(std::memcmp(h, kMagic, 8) == 0, path,
              ": wrong magic number (not a Tandem record shard written by "
              "tools:pack)");
  TD_CHECK_IO(get32(h + 44) == crc32_of(h, 44), path, ": corrupt header (checksum mismatch)");
  const uint32_t version = get32(h + 8);
  TD_CHECK_IO(version == kVersion, path, ": record format version ", version, ", this build reads version ", kVersion);
  s.shard_index = get32(h + 12);
  s.shard_count = get32(h + 16);
  s.num_classes = get32(h + 20);
  const uint64_t records = get64(h + 24), index_offset = get64(h + 32);
  TD_CHECK_IO(s.num_classes > 0 && s.shard_index < s.shard_count, path, ": corrupt header (shard ", s.shard_index,
              " of ", s.shard_count, ", ", s.num_classes, " classes)");
  TD_CHECK_IO(index_offset >= kHeaderSize && index_offset <= size && records <= (size - index_offset) / kEntrySize,
              path, ": truncated or corrupt: the header places ", records, " index entries at byte ", index_offset,
              " of a ", size, "-byte file");
  std::vector<uint8_t> index(size - index_offset);
  s.file->read(index_offset, index.data(), index.size());
  TD_CHECK_IO(index.size() >= records * kEntrySize + 8, path, ": truncated index");
  // Class names, then the checksum, which must end the file.
  size_t pos = records * kEntrySize;
  const uint32_t names = get32(index.data() + pos);
  pos += 4;
  for (uint32_t i = 0; i < names; ++i) {
    TD_CHECK_IO(pos + 4 <= index.size(), path, ": truncated class name list");
    const uint32_t len = get32(index.data() + pos);
    pos += 4;
    TD_CHECK_IO(len <= index.size() && pos + len <= index.size(), path, ": truncated class name list");
    s.class_names.emplace_back(reinterpret_cast<const char*>(index.data() + pos), len);
    pos += len;
  }
  TD_CHECK_IO(pos + 4 == index.size(), path, ": truncated or corrupt index (", index.size() - pos,
              " bytes where a 4-byte checksum should end the file)");
  TD_CHECK_IO(get32(index.data() + pos) == crc32_of(index.data(), pos), path, ": corrupt index (checksum mismatch)");
  TD_CHECK_IO(names == 0 || names == s.num_classes, path, ": ", names, " class names for ", s.num_classes, " classes");
  s.entries.resize(records);
  for (uint64_t i = 0; i < records; ++i) {
    const uint8_t* p = index.data() + i * kEntrySize;
    RecordEntry& e = s.entries[i];
    e.offset = get64(p);
    e.length = get32(p + 8);
    e.crc = get32(p + 12);
    e.label = get32(p + 16);
    e.height = get32(p + 20);
    e.width = get32(p + 24);
    e.channels = p[28];
    e.encoding = static_cast<RecordEncoding>(p[29]);
    TD_CHECK_IO(e.offset >= kHeaderSize && e.offset <= index_offset && e.length <= index_offset - e.offset, path,
                ": record ", i, " lies outside the payload area (bytes ", e.offset, " + ", e.length,
                ", payloads end at byte ", index_offset, ")");
    TD_CHECK_IO(e.label < s.num_classes, path, ": record ", i, " has label ", e.label, ", outside [0, ", s.num_classes,
                ")");
    TD_CHECK_IO(p[29] <= 2, path, ": record ", i, " has unknown encoding ", static_cast<int>(p[29]));
    TD_CHECK_IO(e.height > 0 && e.width > 0 && (e.channels == 1 || e.channels == 3), path, ": record ", i,
                " has image size ", e.height, "x", e.width, "x", static_cast<int>(e.channels));
    if (e.encoding == RecordEncoding::Raw) {
      const uint64_t pixels = checked_mul<uint64_t>(e.height, e.width, path, ": record ", i, " image size");
      const uint64_t bytes = checked_mul<uint64_t>(pixels, e.channels, path, ": record ", i, " image size");
      TD_CHECK_IO(bytes == e.length, path, ": record ", i, " holds ", e.length, " raw bytes for a ", e.height, "x",
                  e.width, "x", static_cast<int>(e.channels), " image");
    }
  }
  return s;
}

class PackedDataset : public Dataset {
 public:
  PackedDataset(const std::vector<std::string>& paths, std::string name) : name_(std::move(name)) {
    for (const std::string& p : paths) {
      shards_.push_back(open_shard(p));
      const Shard& s = shards_.back();
      if (paths.size() > 1) {
        TD_CHECK_IO(s.shard_count == paths.size() && s.shard_index == shards_.size() - 1, p, ": claims to be shard ",
                    s.shard_index, " of ", s.shard_count, ", but is file ", shards_.size() - 1, " of ", paths.size());
        TD_CHECK_IO(s.num_classes == shards_[0].num_classes && s.class_names == shards_[0].class_names, p,
                    ": its classes differ from those of ", shards_[0].file->path());
      }
      starts_.push_back(count_);
      count_ += static_cast<int64_t>(s.entries.size());
    }
  }

  int64_t size() const override { return count_; }
  int64_t num_classes() const override { return shards_[0].num_classes; }

  Sample get(int64_t index) const override {
    TD_CHECK_INDEX(index >= 0 && index < count_, name_, ": index ", index, " out of range [0, ", count_, ")");
    const size_t k = static_cast<size_t>(std::upper_bound(starts_.begin(), starts_.end(), index) - starts_.begin() - 1);
    const Shard& s = shards_[k];
    const int64_t local = index - starts_[k];
    const RecordEntry& e = s.entries[static_cast<size_t>(local)];
    std::vector<uint8_t> payload(e.length);
    s.file->read(e.offset, payload.data(), payload.size());
    std::ostringstream where;
    where << s.file->path() << " record " << local;
    TD_CHECK_IO(crc32_of(payload.data(), payload.size()) == e.crc, where.str(), ": corrupt (checksum mismatch)");
    Sample out;
    out.label = e.label;
    if (e.encoding == RecordEncoding::Raw) {
      out.image.height = e.height;
      out.image.width = e.width;
      out.image.channels = e.channels;
      out.image.hwc = std::move(payload);
    } else {
      out.image = decode_image(payload.data(), payload.size(), e.channels, where.str());
      TD_CHECK_IO(out.image.height == e.height && out.image.width == e.width, where.str(), ": decodes to ",
                  out.image.height, "x", out.image.width, " but the index says ", e.height, "x", e.width);
    }
    return out;
  }

  std::string describe() const override {
    std::ostringstream os;
    os << name_ << ": " << count_ << " records in " << shards_.size() << " shard(s), " << num_classes() << " classes";
    return os.str();
  }

 private:
  std::string name_;
  std::vector<Shard> shards_;
  std::vector<int64_t> starts_;
  int64_t count_ = 0;
};

std::string dirname_of(const std::string& path) {
  size_t slash = path.rfind('/');
  if (slash == std::string::npos) return ".";
  return slash == 0 ? "/" : path.substr(0, slash);
}

// The shards of `prefix`, in order; empty when there are none. Throws IoError for an incomplete set.
std::vector<std::string> find_shards(const std::string& prefix) {
  const std::string dir = dirname_of(prefix);
  if (!is_directory(dir)) return {};
  const std::string base = prefix.substr(prefix.rfind('/') == std::string::npos ? 0 : prefix.rfind('/') + 1);
  long long count = -1;
  std::vector<std::string> found;
  for (const std::string& name : list_directory(dir)) {
    long long index = 0, total = 0;
    int used = 0;
    if (name.compare(0, base.size() + 1, base + "-") != 0) continue;
    if (std::sscanf(name.c_str() + base.size(), "-%5lld-of-%5lld.tdrec%n", &index, &total, &used) != 2 ||
        static_cast<size_t>(used) != name.size() - base.size())
      continue;
    TD_CHECK_IO(count < 0 || total == count, "packed ", prefix, ": shards disagree on the shard count (", name, ")");
    count = total;
    found.push_back(join_path(dir, name));
  }
  if (found.empty()) return {};
  for (long long i = 0; i < count; ++i) {
    std::string expected = shard_path(prefix, i, count);
    TD_CHECK_IO(std::find(found.begin(), found.end(), expected) != found.end(), "packed ", prefix, ": shard ", expected,
                " is missing (", found.size(), " of ", count, " present)");
  }
  std::sort(found.begin(), found.end());
  return found;
}

}  // namespace

std::shared_ptr<Dataset> open_packed(const std::string& path, bool train) {
  const std::string ext = ".tdrec";
  if (path.size() > ext.size() && path.compare(path.size() - ext.size(), ext.size(), ext) == 0 && !is_directory(path))
    return std::make_shared<PackedDataset>(std::vector<std::string>{path}, "packed " + path);
  if (is_directory(path)) {
    std::vector<std::string> splits =
        train ? std::vector<std::string>{"train"} : std::vector<std::string>{"val", "test"};
    for (const std::string& split : splits) {
      std::vector<std::string> shards = find_shards(join_path(path, split));
      if (!shards.empty()) return std::make_shared<PackedDataset>(shards, "packed " + join_path(path, split));
    }
    TD_THROW(IoError, "packed: no ", train ? "train-*.tdrec" : "val-*.tdrec or test-*.tdrec", " shards in ", path);
  }
  std::vector<std::string> shards = find_shards(path);
  TD_CHECK_IO(!shards.empty(), "packed: no shards ", path, "-NNNNN-of-NNNNN.tdrec found");
  return std::make_shared<PackedDataset>(shards, "packed " + path);
}

}  // namespace data
}  // namespace tandem
