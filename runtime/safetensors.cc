// Safetensors reader and writer, with the small JSON parser and writer its header needs.
#include "runtime/safetensors.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <limits>
#include <set>
#include <sstream>

#include "runtime/autograd.h"
#include "runtime/error.h"

namespace tandem {

namespace {

static_assert(sizeof(uint64_t) == 8, "safetensors needs 64-bit integers");

// Headers larger than this are refused as corrupt (the reference implementation's limit).
constexpr uint64_t kMaxHeaderBytes = 100u << 20;

// ---- JSON: just what safetensors headers use (objects, arrays, strings, integers; others parsed and kept) ----

struct Json {
  enum Kind { Null, Bool, Number, String, Array, Object } kind = Null;
  bool boolean = false;
  bool integral = false;  // a number written without fraction or exponent that fits in int64
  int64_t integer = 0;
  double number = 0;
  std::string str;
  std::vector<Json> items;                            // Array
  std::vector<std::pair<std::string, Json>> members;  // Object, in file order
  size_t offset = 0;                                  // where the value starts in the header
};

class JsonParser {
 public:
  JsonParser(const std::string& text, const std::string& what) : s_(text), what_(what) {}

  Json parse_document() {
    Json v = value(0);
    skip_space();
    if (pos_ != s_.size()) fail("unexpected text after the JSON object");
    return v;
  }

 private:
  [[noreturn]] void fail(const std::string& why) const {
    TD_THROW(IoError, what_, ": corrupt header: ", why, " at header byte ", pos_, " (file byte ", pos_ + 8, ")");
  }

  void skip_space() {
    while (pos_ < s_.size() && (s_[pos_] == ' ' || s_[pos_] == '\n' || s_[pos_] == '\r' || s_[pos_] == '\t')) ++pos_;
  }

  void expect(char c) {
    skip_space();
    if (pos_ >= s_.size() || s_[pos_] != c) fail(std::string("expected '") + c + "'");
    ++pos_;
  }

  Json value(int depth) {
    if (depth > 64) fail("nesting deeper than 64 levels");
    skip_space();
    if (pos_ >= s_.size()) fail("unexpected end of the header");
    Json v;
    v.offset = pos_;
    char c = s_[pos_];
    if (c == '{') {
      v.kind = Json::Object;
      ++pos_;
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == '}') {
        ++pos_;
        return v;
      }
      while (true) {
        skip_space();
        if (pos_ >= s_.size() || s_[pos_] != '"') fail("expected a string key");
        std::string key = string();
        expect(':');
        v.members.emplace_back(std::move(key), value(depth + 1));
        skip_space();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        expect('}');
        return v;
      }
    }
    if (c == '[') {
      v.kind = Json::Array;
      ++pos_;
      skip_space();
      if (pos_ < s_.size() && s_[pos_] == ']') {
        ++pos_;
        return v;
      }
      while (true) {
        v.items.push_back(value(depth + 1));
        skip_space();
        if (pos_ < s_.size() && s_[pos_] == ',') {
          ++pos_;
          continue;
        }
        expect(']');
        return v;
      }
    }
    if (c == '"') {
      v.kind = Json::String;
      v.str = string();
      return v;
    }
    if (literal("true")) {
      v.kind = Json::Bool;
      v.boolean = true;
      return v;
    }
    if (literal("false")) {
      v.kind = Json::Bool;
      return v;
    }
    if (literal("null")) return v;
    if (c == '-' || (c >= '0' && c <= '9')) return number();
    fail(std::string("unexpected character '") + c + "'");
  }

  bool literal(const char* word) {
    size_t n = std::strlen(word);
    if (s_.compare(pos_, n, word) != 0) return false;
    pos_ += n;
    return true;
  }

  Json number() {
    Json v;
    v.kind = Json::Number;
    v.offset = pos_;
    size_t start = pos_;
    bool integral = true;
    if (s_[pos_] == '-') ++pos_;
    auto digits = [&] {
      size_t d = pos_;
      while (pos_ < s_.size() && s_[pos_] >= '0' && s_[pos_] <= '9') ++pos_;
      if (pos_ == d) fail("malformed number");
    };
    digits();
    if (pos_ < s_.size() && s_[pos_] == '.') {
      integral = false;
      ++pos_;
      digits();
    }
    if (pos_ < s_.size() && (s_[pos_] == 'e' || s_[pos_] == 'E')) {
      integral = false;
      ++pos_;
      if (pos_ < s_.size() && (s_[pos_] == '+' || s_[pos_] == '-')) ++pos_;
      digits();
    }
    std::string text = s_.substr(start, pos_ - start);
    v.number = std::strtod(text.c_str(), nullptr);
    if (integral) {
      errno = 0;
      long long i = std::strtoll(text.c_str(), nullptr, 10);
      v.integral = errno != ERANGE;
      v.integer = i;
    }
    return v;
  }

  static void put_utf8(std::string& out, uint32_t cp) {
    if (cp < 0x80) {
      out += static_cast<char>(cp);
    } else if (cp < 0x800) {
      out += static_cast<char>(0xC0 | (cp >> 6));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
      out += static_cast<char>(0xE0 | (cp >> 12));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    } else {
      out += static_cast<char>(0xF0 | (cp >> 18));
      out += static_cast<char>(0x80 | ((cp >> 12) & 0x3F));
      out += static_cast<char>(0x80 | ((cp >> 6) & 0x3F));
      out += static_cast<char>(0x80 | (cp & 0x3F));
    }
  }

  uint32_t hex4() {
    if (pos_ + 4 > s_.size()) fail("truncated \\u escape");
    uint32_t v = 0;
    for (int i = 0; i < 4; ++i) {
      char c = s_[pos_++];
      v <<= 4;
      if (c >= '0' && c <= '9') v |= c - '0';
      else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
      else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
      else fail("bad hex digit in a \\u escape");
    }
    return v;
  }

  std::string string() {
    ++pos_;  // opening quote
    std::string out;
    while (true) {
      if (pos_ >= s_.size()) fail("unterminated string");
      char c = s_[pos_++];
      if (c == '"') return out;
      if (static_cast<unsigned char>(c) < 0x20) fail("control character in a string");
      if (c != '\\') {
        out += c;
        continue;
      }
      if (pos_ >= s_.size()) fail("unterminated escape");
      char e = s_[pos_++];
      switch (e) {
        case '"': out += '"'; break;
        case '\\': out += '\\'; break;
        case '/': out += '/'; break;
        case 'b': out += '\b'; break;
        case 'f': out += '\f'; break;
        case 'n': out += '\n'; break;
        case 'r': out += '\r'; break;
        case 't': out += '\t'; break;
        case 'u': {
          uint32_t cp = hex4();
          if (cp >= 0xD800 && cp < 0xDC00) {  // a surrogate pair
            if (!(literal("\\u"))) fail("unpaired surrogate in a \\u escape");
            uint32_t lo = hex4();
            if (lo < 0xDC00 || lo >= 0xE000) fail("bad low surrogate in a \\u escape");
            cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
          }
          put_utf8(out, cp);
          break;
        }
        default:
          fail(std::string("unknown escape '\\") + e + "'");
      }
    }
  }

  const std::string& s_;
  const std::string& what_;
  size_t pos_ = 0;
};

void write_json_string(std::ostringstream& os, const std::string& s) {
  os << '"';
  for (unsigned char c : s) {
    switch (c) {
      case '"': os << "\\\""; break;
      case '\\': os << "\\\\"; break;
      case '\n': os << "\\n"; break;
      case '\r': os << "\\r"; break;
      case '\t': os << "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          os << buf;
        } else {
          os << static_cast<char>(c);
        }
    }
  }
  os << '"';
}

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

class File {
 public:
  File(const std::string& path, int flags, mode_t mode = 0644) : path_(path) {
    fd_ = ::open(path.c_str(), flags | O_CLOEXEC, mode);
    TD_CHECK_IO(fd_ >= 0, "cannot open '", path, "': ", std::strerror(errno));
  }
  ~File() {
    if (fd_ >= 0) ::close(fd_);
  }
  File(const File&) = delete;
  File& operator=(const File&) = delete;

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

const Json* member(const Json& obj, const std::string& key) {
  for (const auto& m : obj.members)
    if (m.first == key) return &m.second;
  return nullptr;
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
  std::ostringstream header;
  header << '{';
  bool first = true;
  if (!metadata.empty()) {
    header << "\"__metadata__\":{";
    for (auto it = metadata.begin(); it != metadata.end(); ++it) {
      if (it != metadata.begin()) header << ',';
      write_json_string(header, it->first);
      header << ':';
      write_json_string(header, it->second);
    }
    header << '}';
    first = false;
  }
  uint64_t offset = 0;
  for (const auto& nt : tensors) {
    const std::string& name = nt.first;
    TD_CHECK(!name.empty() && name != "__metadata__", "save_safetensors('", path, "'): invalid tensor name '",
             name, "'");
    TD_CHECK(seen.insert(name).second, "save_safetensors('", path, "'): tensor name '", name, "' appears twice");
    TD_CHECK(nt.second.defined(), "save_safetensors('", path, "'): tensor '", name, "' is undefined");
    Tensor h = nt.second.detach().to(Device::cpu()).contiguous();
    if (!first) header << ',';
    first = false;
    write_json_string(header, name);
    header << ":{\"dtype\":\"" << st_dtype(h.dtype()) << "\",\"shape\":[";
    for (int64_t d = 0; d < h.dim(); ++d) header << (d ? "," : "") << h.shape()[d];
    header << "],\"data_offsets\":[" << offset << ',' << offset + h.nbytes() << "]}";
    offset += h.nbytes();
    host.push_back(h);
  }
  header << '}';
  std::string text = header.str();
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
  TD_CHECK_IO(header_len <= kMaxHeaderBytes, what, ": header length ", header_len,
              " (bytes 0-7) exceeds the limit of ", kMaxHeaderBytes, " bytes; not a safetensors file?");
  TD_CHECK_IO(8 + header_len <= file_size, what, " is truncated: the header needs bytes 8-", 8 + header_len,
              " but the file has ", file_size);
  std::string text(header_len, '\0');
  TD_CHECK_IO(f.read_at(&text[0], header_len, 8), what, " is truncated inside the header");
  TD_CHECK_IO(!text.empty() && text[0] == '{', what, ": the header (byte 8) does not start with '{'");
  Json root = JsonParser(text, what).parse_document();
  TD_CHECK_IO(root.kind == Json::Object, what, ": the header is not a JSON object");

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
  std::set<std::string> names;
  for (const auto& m : root.members) {
    const std::string& name = m.first;
    const Json& v = m.second;
    TD_CHECK_IO(names.insert(name).second, what, ": key '", name, "' appears twice in the header");
    if (name == "__metadata__") {
      TD_CHECK_IO(v.kind == Json::Object, what, ": __metadata__ must be an object of strings");
      for (const auto& kv : v.members) {
        TD_CHECK_IO(kv.second.kind == Json::String, what, ": __metadata__ value of '", kv.first,
                    "' is not a string (header byte ", kv.second.offset, ")");
        out.metadata[kv.first] = kv.second.str;
      }
      continue;
    }
    TD_CHECK_IO(v.kind == Json::Object, what, ": entry of tensor '", name, "' is not an object");
    const Json* dt = member(v, "dtype");
    const Json* shape = member(v, "shape");
    const Json* offs = member(v, "data_offsets");
    TD_CHECK_IO(dt && dt->kind == Json::String, what, ": tensor '", name, "' has no string \"dtype\"");
    TD_CHECK_IO(shape && shape->kind == Json::Array, what, ": tensor '", name, "' has no \"shape\" array");
    TD_CHECK_IO(offs && offs->kind == Json::Array && offs->items.size() == 2, what, ": tensor '", name,
                "' needs \"data_offsets\": [begin, end]");
    Entry e;
    e.name = name;
    e.dtype = parse_st_dtype(dt->str, what + ", tensor '" + name + "'");
    for (const Json& d : shape->items) {
      TD_CHECK_IO(d.kind == Json::Number && d.integral && d.integer >= 0, what, ": tensor '", name,
                  "' has a bad dimension in its shape (header byte ", d.offset, ")");
      e.shape.push_back(d.integer);
    }
    for (int i = 0; i < 2; ++i)
      TD_CHECK_IO(offs->items[i].kind == Json::Number && offs->items[i].integral && offs->items[i].integer >= 0,
                  what, ": tensor '", name, "' has a bad data offset (header byte ", offs->items[i].offset, ")");
    e.begin = static_cast<uint64_t>(offs->items[0].integer);
    e.end = static_cast<uint64_t>(offs->items[1].integer);
    uint64_t numel = 1;
    for (int64_t d : e.shape) {
      TD_CHECK_IO(d == 0 || numel <= std::numeric_limits<uint64_t>::max() / static_cast<uint64_t>(d), what,
                  ": tensor '", name, "' has an absurd shape ", shape_str(e.shape));
      numel *= static_cast<uint64_t>(d);
    }
    TD_CHECK_IO(e.begin <= e.end && e.end - e.begin == numel * dtype_size(e.dtype), what, ": tensor '", name,
                "' of shape ", shape_str(e.shape), " and dtype ", dt->str, " needs ", numel * dtype_size(e.dtype),
                " bytes but its data_offsets [", e.begin, ", ", e.end, "] span ", e.end - e.begin);
    TD_CHECK_IO(e.end <= data_size, what, " is truncated: tensor '", name, "' ends at file byte ", data_start + e.end,
                " but the file has ", file_size, " bytes");
    entries.push_back(std::move(e));
  }
  std::sort(entries.begin(), entries.end(), [](const Entry& a, const Entry& b) { return a.begin < b.begin; });
  // The data buffer must be covered exactly, without holes or overlaps.
  uint64_t expected = 0;
  for (const Entry& e : entries) {
    TD_CHECK_IO(e.begin == expected, what, ": tensor '", e.name, "' starts at data byte ", e.begin,
                " (file byte ", data_start + e.begin, ") but the previous tensor ends at data byte ", expected,
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
