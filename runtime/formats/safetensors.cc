// Safetensors reader and writer (the header is JSON, nlohmann::json through runtime/formats/json.h's strict parser).
#include "runtime/formats/safetensors.h"
#include "runtime/base/non_copyable.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <nlohmann/json.hpp>
#include <set>

#include "runtime/base/checked_math.h"
#include "runtime/base/error.h"
#include "runtime/formats/json.h"
#include "runtime/tensor/autograd.h"

namespace tandem {

namespace {

static_assert(sizeof(uint64_t) == 8, "safetensors needs 64-bit integers");

// Headers larger than this are refused as corrupt (the reference implementation's limit).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

// ---- dtypes ----

const char* st_dtype(DType t) {
  switch (t) {
    case DType::F32: return "F32";
    case DType::F64: return "F64";
    case DType::F16: return "F16";
    case DType::BF16: return "BF16";
    case DType::I32: return "I32";
    case DType::I64: return "I64";
    case DType::U8: return "U8";
  }
  TD_THROW(InternalError, "unknown dtype");
}

DType parse_st_dtype(const std::string& s, const std::string& what) {
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16, DType::I32, DType::I64, DType::U8})
    if (s == st_dtype(t)) return t;
  if (s == "BOOL") return DType::U8;  // one byte of 0/1, as PyTorch writes it
  TD_THROW(DTypeError, what, ": dtype \"", s, "\" is not supported (F32, F64, F16, BF16, I32, I64, U8, BOOL are)");
}

// ---- file helpers ----

class File : NonCopyable {
 public:
  File(const std::string& path, int flags, mode_t mode = 0644) : path_(path) {
    fd_ = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    TD_CHECK_IO(fd_ >= 0, "cannot open '", path, "': ", std::strerror(errno));
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }

  void write_all(const void* data, size_t n) {
    const char* p = static_cast<const char*>(data);
    while (n > 0) {
      ssize_t w = ::write(fd_, p, n);
      if (w < 0 && errno == EINTR) continue;
      TD_CHECK_IO(w > 0, "cannot write '", path_, "': ", std::strerror(errno));
      p += w;
      n -= static_cast<size_t>(w);
    }
  }
  // Reads exactly n bytes at `offset`; returns false at a premature end of file.
  bool read_at(void* data, size_t n, uint64_t offset) {
    char* p = static_cast<char*>(data);
    while (n > 0) {
      ssize_t r = ::pread(fd_, p, n, static_cast<off_t>(offset));
      if (r < 0 && errno == EINTR) continue;
      TD_CHECK_IO(r >= 0, "cannot read '", path_, "': ", std::strerror(errno));
      if (r == 0) return false;
      p += r;
      offset += static_cast<uint64_t>(r);
      n -= static_cast<size_t>(r);
    }
    return true;
  }
  uint64_t size() {
    off_t end = ::lseek(fd_, 0, SEEK_END);
    TD_CHECK_IO(end >= 0, "cannot seek in '", path_, "': ", std::strerror(errno));
    return static_cast<uint64_t>(end);
  }
  void sync() { TD_CHECK_IO(::fsync(fd_) == 0, "cannot fsync '", path_, "': ", std::strerror(errno)); }
  void close() {
    int fd = fd_;
    fd_ = -1;
    TD_CHECK_IO(::close(fd) == 0, "cannot close '", path_, "': ", std::strerror(errno));
  }

 private:
  std::string path_;
  int fd_ = -1;
};

void put_u64_le(unsigned char* out, uint64_t v) {
  for (int i = 0; i < 8; ++i) out[i] = static_cast<unsigned char>(v >> (8 * i));
}
uint64_t get_u64_le(const unsigned char* in) {
  uint64_t v = 0;
  for (int i = 0; i < 8; ++i) v |= static_cast<uint64_t>(in[i]) << (8 * i);
  return v;
}

bool little_endian_host() {
  const uint16_t one = 1;
  unsigned char b;
  std::memcpy(&b, &one, 1);
  return b == 1;
}

}  // namespace

const Tensor* SafetensorsContents::find(const std::string& name) const {
  for (const auto& t : tensors)
    if (t.first == name) return &t.second;
  return nullptr;
}

void save_safetensors(const std::string& path, const NamedTensors& tensors, const SafetensorsMetadata& metadata) {
  TD_ASSERT(little_endian_host(), "safetensors I/O assumes a little-endian host");
  std::set<std::string> seen;
  std::vector<Tensor> host;
  host.reserve(tensors.size());
  Json header = Json::object();
  if (!metadata.empty()) {
    Json meta = Json::object();
    for (const auto& kv : metadata) meta[kv.first] = kv.second;
    header["__metadata__"] = meta;
  }
  uint64_t offset = 0;
  for (const auto& nt : tensors) {
    const std::string& name = nt.first;
    TD_CHECK(!name.empty() && name != "__metadata__", "save_safetensors('", path, "'): invalid tensor name '", name,
             "'");
    TD_CHECK(seen.insert(name).second, "save_safetensors('", path, "'): tensor name '", name, "' appears twice");
    TD_CHECK(nt.second.defined(), "save_safetensors('", path, "'): tensor '", name, "' is undefined");
    Tensor h = nt.second.detach().to(Device::cpu()).contiguous();
    Json entry = Json::object();
    entry["dtype"] = st_dtype(h.dtype());
    Json shape = Json::array();
    for (int64_t d : h.shape()) shape.push_back(d);
    entry["shape"] = shape;
    entry["data_offsets"] =
        Json::array({Json(static_cast<int64_t>(offset)), Json(static_cast<int64_t>(offset + h.nbytes()))});
    header[name] = entry;
    offset += h.nbytes();
    host.push_back(h);
  }
  std::string text = dump_json(header);
  text.append((8 - text.size() % 8) % 8, ' ');

  std::string tmp = path + ".tmp";
  try {
    File f(tmp, O_WRONLY | O_CREAT | O_TRUNC);
    unsigned char len[8];
    put_u64_le(len, text.size());
    f.write_all(len, 8);
    f.write_all(text.data(), text.size());
    for (const Tensor& h : host)
      if (h.nbytes() > 0) f.write_all(h.raw_data(), h.nbytes());
    f.sync();
    f.close();
  } catch (...) {
    ::unlink(tmp.c_str());  // a half-written file must not linger next to the checkpoint
    throw;
  }
  TD_CHECK_IO(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path,
              "': ", std::strerror(errno));
  // Make the rename itself durable.
  std::string dir = path.find('/') == std::string::npos ? "." : path.substr(0, path.find_last_of('/'));
  if (dir.empty()) dir = "/";
  int dfd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  if (dfd >= 0) {
    ::fsync(dfd);
    ::close(dfd);
  }
}

SafetensorsContents load_safetensors(const std::string& path) {
  TD_ASSERT(little_endian_host(), "safetensors I/O assumes a little-endian host");
  File f(path, O_RDONLY);
  const std::string what = "safetensors file '" + path + "'";
  uint64_t file_size = f.size();
  unsigned char len_bytes[8];
  TD_CHECK_IO(file_size >= 8 && f.read_at(len_bytes, 8, 0), what, " is truncated: ", file_size,
              " bytes, shorter than the 8-byte header length");
  uint64_t header_len = get_u64_le(len_bytes);
  TD_CHECK_IO(header_len <= kMaxHeaderBytes, what, ": header length ", header_len, " (bytes 0-7) exceeds the limit of ",
              kMaxHeaderBytes, " bytes; not a safetensors file?");
  TD_CHECK_IO(8 + header_len <= file_size, what, " is truncated: the header needs bytes 8-", 8 + header_len,
              " but the file has ", file_size);
  std::string text(header_len, '\0');
  TD_CHECK_IO(f.read_at(&text[0], header_len, 8), what, " is truncated inside the header");
  TD_CHECK_IO(!text.empty() && text[0] == '{', what, ": the header (byte 8) does not start with '{'");

  const uint64_t data_start = 8 + header_len;
  const uint64_t data_size = file_size - data_start;
  SafetensorsContents out;
  struct Entry {
    std::string name;
    DType dtype;
    Shape shape;
    uint64_t begin, end;
  };
  std::vector<Entry> entries;
  try {
    Json root = parse_json(text);  // refuses duplicate keys
    for (const auto& m : json_object(root, "the header").items()) {
      const std::string& name = m.key();
      const Json& v = m.value();
      if (name == "__metadata__") {
        for (const auto& kv : json_object(v, "__metadata__").items())
          out.metadata[kv.key()] = json_string(kv.value(), "__metadata__ value of '" + kv.key() + "'");
        continue;
      }
      const std::string tensor = "tensor '" + name + "'";
      Entry e;
      e.name = name;
      e.dtype = parse_st_dtype(json_string(json_at(v, "dtype"), tensor + " dtype"), what + ", " + tensor);
      for (const Json& d : json_array(json_at(v, "shape"), tensor + " shape")) {
        int64_t n = json_int(d, tensor + " dimension");
        TD_CHECK(n >= 0, tensor, " has a negative dimension ", n);
        e.shape.push_back(n);
      }
      const Json& offs = json_array(json_at(v, "data_offsets"), tensor + " data_offsets");
      TD_CHECK(offs.size() == 2, tensor, " needs \"data_offsets\": [begin, end]");
      int64_t begin = json_int(offs[0], tensor + " data offset"), end = json_int(offs[1], tensor + " data offset");
      TD_CHECK(begin >= 0 && end >= 0, tensor, " has a negative data offset");
      e.begin = static_cast<uint64_t>(begin);
      e.end = static_cast<uint64_t>(end);
      entries.push_back(std::move(e));
    }
  } catch (const ValueError& err) {
    TD_THROW(IoError, what, ": corrupt header (file bytes 8-", data_start, "): ", err.message());
  }
  for (const Entry& e : entries) {
    // Tensor strides and byte counts are int64: the product of the non-zero dimensions and the element size
    // must fit even when a zero dimension makes the tensor empty.
    int64_t extent = static_cast<int64_t>(dtype_size(e.dtype));
    bool empty_tensor = false;
    for (int64_t d : e.shape) {
      if (d == 0)
        empty_tensor = true;
      else
        extent = checked_mul<int64_t>(extent, d, what, ": tensor '", e.name, "' of shape ", shape_str(e.shape),
                                      " and dtype ", dtype_name(e.dtype), " has more bytes than 2^63");
    }
    const uint64_t nbytes = empty_tensor ? 0 : static_cast<uint64_t>(extent);
    TD_CHECK_IO(e.begin <= e.end && e.end - e.begin == nbytes, what, ": tensor '", e.name, "' of shape ",
                shape_str(e.shape), " and dtype ", dtype_name(e.dtype), " needs ", nbytes,
                " bytes but its data_offsets [", e.begin, ", ", e.end, "] span ",
                e.begin <= e.end ? e.end - e.begin : 0);
    TD_CHECK_IO(e.end <= data_size, what, " is truncated: tensor '", e.name, "' ends at file byte ", data_start + e.end,
                " but the file has ", file_size, " bytes");
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  // The data buffer must be covered exactly, without holes or overlaps.
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    TD_CHECK_IO(e.begin == expected, what, ": tensor '", e.name, "' starts at data byte ", e.begin, " (file byte ",
                data_start + e.begin, ") but the previous tensor ends at data byte ", expected,
                " (overlapping or missing data)");
    expected = e.end;
  }
  TD_CHECK_IO(expected == data_size, what, ": ", data_size - expected, " stray bytes after the last tensor (file byte ",
              data_start + expected, ")");

  for (const Entry& e : entries) {
    Tensor t = empty(e.shape, TensorOptions(e.dtype).with_device(Device::cpu()));
    if (t.nbytes() > 0)
      TD_CHECK_IO(f.read_at(t.raw_data(), t.nbytes(), data_start + e.begin), what, " is truncated inside tensor '",
                  e.name, "'");
    out.tensors.emplace_back(e.name, t);
  }
  return out;
}

}  // namespace tandem
