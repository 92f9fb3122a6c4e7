// Safetensors reader and writer: round trips, files written byte by byte in the test, and corrupt files.
#include <gtest/gtest.h>

#include <cstdio>
#include <cstring>
#include <fstream>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/formats/safetensors.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using tandem::testing::expect_error;

// TempDir() ends with a slash.
std::string temp_path(const std::string& name) { return ::testing::TempDir() + name; }

void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// A file of the format built by hand: header length, header text, data.
std::string make_file(const std::string& header, const std::string& data) {
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[i] = static_cast<char>((n >> (8 * i)) & 0xFF);
  return out + header + data;
}

template <typename T>
std::string raw(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

TEST(Safetensors, RoundTripEveryDtype) {
  Generator g(tandem::testing::fresh_seed());
  NamedTensors in = {
      {"a.weight", randn({3, 4}, g)},
      {"b", randn({2, 1, 5}, g).to(DType::F64)},
      {"half", randn({7}, g).to(DType::F16)},
      {"bhalf", randn({2, 2}, g).to(DType::BF16)},
      {"count", from_vector<int64_t>({-5, 1ll << 40}, {2})},
      {"i32", from_vector<int32_t>({1, -2, 3}, {3})},
      {"bytes", from_vector<uint8_t>({0, 255, 7}, {3})},
      {"scalar", full({}, 3.5)},
      {"empty", zeros({0, 4})},
      {"strided", randn({4, 3}, g).t()},  // non-contiguous: written in row-major order of the view
  };
  SafetensorsMetadata meta = {{"format", "pt"}, {"note", "quote \" backslash \\ newline \n tab \t \x01 \xc3\xa9"}};
  std::string path = temp_path("roundtrip.safetensors");
  save_safetensors(path, in, meta);
  EXPECT_FALSE(std::ifstream(path + ".tmp").good()) << "the temporary file must be renamed away";
  // The header length is a multiple of 8 and the header is JSON starting with '{'.
  std::string bytes = read_bytes(path);
  uint64_t n = 0;
  for (int i = 0; i < 8; ++i) n |= static_cast<uint64_t>(static_cast<unsigned char>(bytes[i])) << (8 * i);
  EXPECT_EQ(n % 8, 0u);
  EXPECT_EQ(bytes[8], '{');

  SafetensorsContents out = load_safetensors(path);
  EXPECT_EQ(out.metadata, meta);
  ASSERT_EQ(out.tensors.size(), in.size());
  for (size_t i = 0; i < in.size(); ++i) {
    EXPECT_EQ(out.tensors[i].first, in[i].first);  // written in order, read in offset order
    const Tensor* t = out.find(in[i].first);
    ASSERT_NE(t, nullptr);
    EXPECT_EQ(t->device(), Device::cpu());
    tandem::testing::expect_bitwise_equal(*t, in[i].second.contiguous(), in[i].first);
  }
  EXPECT_EQ(out.find("missing"), nullptr);
}

TEST(Safetensors, ReadsAHandWrittenFile) {
  // Whitespace, escaped names, offsets out of order, __metadata__ last, BOOL stored as u8.
  std::vector<float> w = {1.5f, -2.0f, 3.25f, 0.0f};
  std::vector<int64_t> s = {42};
  std::vector<uint8_t> b = {1, 0, 1};
  std::string data = raw(s) + raw(w) + raw(b);
  std::string header =
      "{ \"w\\u00e9ight\" : {\"dtype\":\"F32\", \"shape\":[2,2], \"data_offsets\":[8,24]},\n"
      "  \"steps\": {\"shape\": [], \"dtype\": \"I64\", \"data_offsets\": [0, 8]},\n"
      "  \"mask\": {\"dtype\": \"BOOL\", \"shape\": [3], \"data_offsets\": [24, 27]},\n"
      "  \"__metadata__\": {\"format\": \"pt\"} }";
  std::string path = temp_path("hand.safetensors");
  write_bytes(path, make_file(header, data));
  SafetensorsContents c = load_safetensors(path);
  ASSERT_EQ(c.tensors.size(), 3u);
  EXPECT_EQ(c.tensors[0].first, "steps");
  const Tensor* t = c.find("w\xc3\xa9ight");
  ASSERT_NE(t, nullptr);
  EXPECT_EQ(t->shape(), (Shape{2, 2}));
  EXPECT_EQ(t->to_vector<float>(), w);
  EXPECT_EQ(c.find("steps")->item<int64_t>(), 42);
  EXPECT_EQ(c.find("mask")->dtype(), DType::U8);
  EXPECT_EQ(c.metadata.at("format"), "pt");
}

TEST(Safetensors, OverwritesAtomically) {
  std::string path = temp_path("overwrite.safetensors");
  save_safetensors(path, {{"x", full({2}, 1.0)}});
  save_safetensors(path, {{"y", full({3}, 2.0)}});
  SafetensorsContents c = load_safetensors(path);
  ASSERT_EQ(c.tensors.size(), 1u);
  EXPECT_EQ(c.tensors[0].first, "y");
}

TEST(Safetensors, RefusesBadTensorsToWrite) {
  std::string path = temp_path("bad_write.safetensors");
  expect_error<ValueError>([&] { save_safetensors(path, {{"x", zeros({1})}, {"x", zeros({1})}}); }, "appears twice");
  expect_error<ValueError>([&] { save_safetensors(path, {{"", zeros({1})}}); }, "invalid tensor name");
  expect_error<IoError>(
      [&] {
        save_safetensors("/nonexistent-dir/x.safetensors", {{"x", zeros({1})}});
      },
      "cannot open");
}

TEST(Safetensors, CorruptFilesNameTheFault) {
  std::string path = temp_path("corrupt.safetensors");
  std::vector<float> w = {1, 2, 3, 4};
  const std::string good_header = "{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}";

  expect_error<IoError>([&] { load_safetensors(temp_path("does-not-exist.safetensors")); }, "cannot open");

  write_bytes(path, "abc");
  expect_error<IoError>([&] { load_safetensors(path); }, "shorter than the 8-byte header length");

  write_bytes(path, make_file(good_header, raw(w)).substr(0, 20));
  expect_error<IoError>([&] { load_safetensors(path); }, "truncated: the header needs bytes 8-");

  write_bytes(path, make_file(good_header, raw(w)).substr(0, 8 + good_header.size() + 10));
  expect_error<IoError>([&] { load_safetensors(path); }, "tensor 'w' ends at file byte");

  std::string huge(8, '\xff');
  write_bytes(path, huge + "{}");
  expect_error<IoError>([&] { load_safetensors(path); }, "exceeds the limit");

  write_bytes(path, make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[4] \"data_offsets\":[0,16]}}", raw(w)));
  expect_error<IoError>([&] { load_safetensors(path); }, "invalid JSON at byte 33");

  write_bytes(path, make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,12]}}", raw(w)));
  expect_error<IoError>([&] { load_safetensors(path); }, "tensor 'w' of shape [4] and dtype f32 needs 16 bytes");

  write_bytes(path, make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[0,8]},"
                              "\"v\":{\"dtype\":\"F32\",\"shape\":[2],\"data_offsets\":[4,12]}}",
                              raw(w)));
  expect_error<IoError>([&] { load_safetensors(path); }, "tensor 'v' starts at data byte 4");

  write_bytes(path, make_file(good_header, raw(w) + "xyz"));
  expect_error<IoError>([&] { load_safetensors(path); }, "3 stray bytes after the last tensor");

  write_bytes(path, make_file("{\"w\":{\"dtype\":\"C64\",\"shape\":[2],\"data_offsets\":[0,16]}}", raw(w)));
  expect_error<DTypeError>([&] { load_safetensors(path); }, "dtype \"C64\" is not supported");

  write_bytes(path, make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[-4],\"data_offsets\":[0,16]}}", raw(w)));
  expect_error<IoError>([&] { load_safetensors(path); }, "tensor 'w' has a negative dimension -4");

  write_bytes(path, make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]},"
                              "\"w\":{\"dtype\":\"F32\",\"shape\":[4],\"data_offsets\":[0,16]}}",
                              raw(w)));
  expect_error<IoError>([&] { load_safetensors(path); }, "duplicate key 'w'");

  write_bytes(path, make_file("[1, 2]", ""));
  expect_error<IoError>([&] { load_safetensors(path); }, "does not start with '{'");

  write_bytes(path, make_file("{\"__metadata__\":{\"k\":1}}", ""));
  expect_error<IoError>([&] { load_safetensors(path); }, "__metadata__ value of 'k' should be a string");

  write_bytes(path, make_file("{\"w\":{\"dtype\":\"F32\",\"shape\":[4]}}", raw(w)));
  expect_error<IoError>([&] { load_safetensors(path); }, "missing key 'data_offsets'");

  write_bytes(path, make_file("{\"a\":\"\\q\"}", ""));  // the 'q' is header byte 8
  expect_error<IoError>([&] { load_safetensors(path); }, "invalid JSON at byte 8:");
  expect_error<IoError>([&] { load_safetensors(path); }, "forbidden character after backslash");
}

TEST(Safetensors, ShapesWhoseSizeOverflowsAreRefused) {
  std::string path = temp_path("overflow.safetensors");
  // 2^61 elements fit in 64 bits, their 2^64 bytes of F64 do not: the byte count must not wrap to 0.
  write_bytes(path, make_file("{\"w\":{\"dtype\":\"F64\",\"shape\":[1073741824,2147483648],"
                              "\"data_offsets\":[0,0]}}",
                              ""));
  expect_error<IoError>([&] { load_safetensors(path); }, "tensor 'w' of shape [1073741824, 2147483648] and dtype f64");
  // An empty tensor whose other dimensions multiply past int64 (strides would overflow).
  write_bytes(path, make_file("{\"e\":{\"dtype\":\"U8\",\"shape\":[0,4294967296,4294967296],"
                              "\"data_offsets\":[0,0]}}",
                              ""));
  expect_error<IoError>([&] { load_safetensors(path); }, "does not fit in 64 bits");
  // Huge but representable empty tensors are fine.
  write_bytes(path, make_file("{\"e\":{\"dtype\":\"U8\",\"shape\":[0,4294967296],\"data_offsets\":[0,0]}}", ""));
  EXPECT_EQ(load_safetensors(path).find("e")->numel(), 0);
}

}  // namespace
}  // namespace tandem
