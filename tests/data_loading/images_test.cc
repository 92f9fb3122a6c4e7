// Image files and packed records: JPEG/PNG decoding, image folders, .tdrec shards, and their corrupt variants.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/image_codec.h"
#include "data/image_folder.h"
#include "data/record_file.h"
#include "runtime/base/error.h"
#include "tests/data_loading/dataset_files.h"
#include "tests/testing.h"

namespace tandem {
namespace data {
namespace {

using tandem::testing::expect_error;
using testdata::make_dir;
using testdata::make_temp_dir;
using testdata::write_file;

double mean_abs_diff(const Image& a, const Image& b) {
  EXPECT_EQ(a.hwc.size(), b.hwc.size());
  double d = 0;
  for (size_t i = 0; i < a.hwc.size() && i < b.hwc.size(); ++i) d += std::abs(a.hwc[i] - b.hwc[i]);
  return d / static_cast<double>(a.hwc.size());
}

TEST(Codec, DecodesJpegAndPng) {
  uint64_t seed = testing::fresh_seed();
  Image rgb = testdata::smooth_image(37, 53, 3, seed), gray = testdata::smooth_image(20, 11, 1, seed + 1);
  auto png = testdata::encode_png(rgb);
  Image back = decode_image(png.data(), png.size(), 0, "rgb.png");
  EXPECT_EQ(back.height, 37);
  EXPECT_EQ(back.width, 53);
  EXPECT_EQ(back.hwc, rgb.hwc);  // lossless
  auto gpng = testdata::encode_png(gray);
  Image g0 = decode_image(gpng.data(), gpng.size(), 0, "gray.png"),
        g3 = decode_image(gpng.data(), gpng.size(), 3, "gray.png");
  EXPECT_EQ(g0.channels, 1);
  EXPECT_EQ(g0.hwc, gray.hwc);
  ASSERT_EQ(g3.channels, 3);
  for (size_t i = 0; i < gray.hwc.size(); ++i)
    for (int c = 0; c < 3; ++c) ASSERT_EQ(g3.hwc[i * 3 + c], gray.hwc[i]);
  auto jpg = testdata::encode_jpeg(rgb, 95);
  Image j = decode_image(jpg.data(), jpg.size(), 0, "rgb.jpg");
  EXPECT_EQ(j.channels, 3);
  EXPECT_EQ(j.height, 37);
  EXPECT_EQ(j.hwc, testdata::reference_decode_jpeg(jpg).hwc);
  EXPECT_LT(mean_abs_diff(j, rgb), 8.0);  // and it is the image that was encoded
  auto gjpg = testdata::encode_jpeg(gray, 95);
  Image gj = decode_image(gjpg.data(), gjpg.size(), 0, "gray.jpg");
  EXPECT_EQ(gj.channels, 1);
  EXPECT_EQ(gj.hwc, testdata::reference_decode_jpeg(gjpg).hwc);
  EXPECT_LT(mean_abs_diff(gj, gray), 8.0);
}

TEST(Codec, GarbageAndTruncatedImagesThrowNamingTheSource) {
  uint64_t seed = testing::fresh_seed();
  Image rgb = testdata::smooth_image(64, 64, 3, seed);
  auto jpg = testdata::encode_jpeg(rgb, 90), png = testdata::encode_png(rgb);
  std::vector<uint8_t> garbage_jpg = {0xFF, 0xD8, 0xFF, 0xE0};
  for (int i = 0; i < 300; ++i) garbage_jpg.push_back(static_cast<uint8_t>(i * 37 + seed));
  expect_error<IoError>([&] { decode_image(garbage_jpg.data(), garbage_jpg.size(), 0, "bad.jpg"); },
                        {"bad.jpg", "undecodable JPEG"});
  auto cut = jpg;
  cut.resize(cut.size() / 2);
  expect_error<IoError>([&] { decode_image(cut.data(), cut.size(), 0, "cut.jpg"); }, {"cut.jpg", "JPEG"});
  auto cut_png = png;
  cut_png.resize(cut_png.size() / 2);
  expect_error<IoError>([&] { decode_image(cut_png.data(), cut_png.size(), 0, "cut.png"); }, {"cut.png", "PNG"});
  auto bad_png = png;
  for (size_t i = 40; i < bad_png.size(); i += 7) bad_png[i] ^= 0xA5;
  expect_error<IoError>([&] { decode_image(bad_png.data(), bad_png.size(), 0, "bad.png"); }, {"bad.png", "PNG"});
  std::vector<uint8_t> text = {'h', 'e', 'l', 'l', 'o', ' ', 'w', 'o', 'r', 'l', 'd'};
  expect_error<IoError>([&] { decode_image(text.data(), text.size(), 0, "notes.png"); },
                        {"notes.png", "neither a JPEG nor a PNG"});
  expect_error<IoError>([&] { decode_image(text.data(), 0, 0, "empty.jpg"); }, {"empty.jpg"});
}

// Headers announcing more pixels than the file can hold are refused before anything that size is allocated:
// above 2^28 pixels, or above 2^14 (PNG) or 2^10 (JPEG) pixels per byte of the file, more than the formats can
// encode.
TEST(Codec, ImagesLargerThanTheirFileJustifiesAreRefused) {
  Image rgb = testdata::smooth_image(8, 8, 3, testing::fresh_seed());
  auto png_sized = [&](uint32_t h, uint32_t w) {
    auto png = testdata::encode_png(rgb);
    for (int i = 0; i < 4; ++i) {  // IHDR: length, type at 12, width at 16, height at 20, CRC at 29
      png[16 + i] = static_cast<uint8_t>(w >> (24 - 8 * i));
      png[20 + i] = static_cast<uint8_t>(h >> (24 - 8 * i));
    }
    const uint32_t c = static_cast<uint32_t>(::crc32(0, png.data() + 12, 17));
    for (int i = 0; i < 4; ++i) png[29 + i] = static_cast<uint8_t>(c >> (24 - 8 * i));
    return png;
  };
  auto big = png_sized(20000, 20000);
  expect_error<IoError>([&] { decode_image(big.data(), big.size(), 0, "big.png"); },
                        {"big.png", "20000x20000 pixels is more than the limit of 2^28 pixels"});
  auto dense = png_sized(10000, 10000);
  expect_error<IoError>([&] { decode_image(dense.data(), dense.size(), 0, "dense.png"); },
                        {"dense.png", "10000x10000 pixels is more than a file of " + std::to_string(dense.size()) +
                                          " bytes can hold (16384 pixels per byte)"});

  auto jpg = testdata::encode_jpeg(rgb, 90);
  size_t sof = 2;  // the baseline frame header: FF C0, length, precision, height, width
  while (sof + 9 < jpg.size() && !(jpg[sof] == 0xFF && jpg[sof + 1] == 0xC0)) ++sof;
  ASSERT_LT(sof + 9, jpg.size());
  jpg[sof + 5] = jpg[sof + 7] = 10000 >> 8;
  jpg[sof + 6] = jpg[sof + 8] = 10000 & 0xFF;
  expect_error<IoError>([&] { decode_image(jpg.data(), jpg.size(), 0, "dense.jpg"); },
                        {"dense.jpg", "10000x10000 pixels is more than a file of", "(1024 pixels per byte)"});
}

// A progressive JPEG whose last scan repeats 600 times (libjpeg only warns about each repeat) would keep the
// decoder busy for as long as the file is long: more than 500 scans are refused. Its 10 real scans decode.
TEST(Codec, JpegsWithThousandsOfScansAreRefused) {
  Image rgb = testdata::smooth_image(16, 16, 3, testing::fresh_seed());
  auto jpg = testdata::encode_jpeg(rgb, 90, true);
  EXPECT_EQ(decode_image(jpg.data(), jpg.size(), 0, "progressive.jpg").height, 16);
  size_t last_scan = 0;
  for (size_t i = 0; i + 1 < jpg.size(); ++i)
    if (jpg[i] == 0xFF && jpg[i + 1] == 0xDA) last_scan = i;
  ASSERT_GT(last_scan, 0u);
  ASSERT_TRUE(jpg[jpg.size() - 2] == 0xFF && jpg.back() == 0xD9);
  const std::vector<uint8_t> scan(jpg.begin() + static_cast<std::ptrdiff_t>(last_scan), jpg.end() - 2);
  jpg.resize(jpg.size() - 2);
  for (int i = 0; i < 600; ++i) jpg.insert(jpg.end(), scan.begin(), scan.end());
  jpg.push_back(0xFF);
  jpg.push_back(0xD9);
  expect_error<IoError>([&] { decode_image(jpg.data(), jpg.size(), 0, "scans.jpg"); },
                        {"scans.jpg", "more than 500 progressive scans"});
}

// root/<class>/<files> with the given classes created in reverse order (the reader must sort).
struct FolderFixture {
  std::string root;
  std::vector<std::string> classes = {"ant", "bee", "cat"};
  std::vector<std::vector<Image>> images;  // per class, in file name order: the exact pixels a reader must give
};

FolderFixture write_folder(uint64_t seed) {
  FolderFixture f;
  f.root = make_temp_dir("folder");
  f.images.resize(3);
  for (int k = 2; k >= 0; --k) {
    const std::string dir = f.root + "/" + f.classes[k];
    make_dir(dir);
    for (int i = 0; i < 2 + k; ++i) {
      Image im = testdata::smooth_image(20 + i, 30 + k, 3, seed + 10 * k + i);
      // Names sort as a.jpg < b.png < c.JPEG ...; alternate formats.
      std::string name = std::string(1, static_cast<char>('a' + i));
      if (i % 2 == 0) {
        auto jpg = testdata::encode_jpeg(im, 95);
        write_file(dir + "/" + name + (i == 2 ? ".JPEG" : ".jpg"), jpg);
        im = testdata::reference_decode_jpeg(jpg);
      } else {
        write_file(dir + "/" + name + ".png", testdata::encode_png(im));
      }
      f.images[k].push_back(im);
    }
    write_file(dir + "/README.txt", {'x'});
  }
  return f;
}

TEST(ImageFolder, SortedClassesAndDecodedImages) {
  FolderFixture f = write_folder(testing::fresh_seed());
  auto ds = open_dataset("folder:" + f.root, true);
  auto folder = std::dynamic_pointer_cast<ImageFolder>(ds);
  ASSERT_NE(folder, nullptr);
  EXPECT_EQ(folder->classes(), f.classes);
  ASSERT_EQ(ds->size(), 2 + 3 + 4);
  EXPECT_EQ(ds->num_classes(), 3);
  int64_t idx = 0;
  for (int k = 0; k < 3; ++k)
    for (size_t i = 0; i < f.images[k].size(); ++i, ++idx) {
      Sample s = ds->get(idx);
      EXPECT_EQ(s.label, k);
      ASSERT_EQ(s.image.height, f.images[k][i].height);
      ASSERT_EQ(s.image.width, f.images[k][i].width);
      EXPECT_EQ(s.image.hwc, f.images[k][i].hwc) << folder->path(idx);
    }
}

TEST(ImageFolder, SplitsAndErrors) {
  uint64_t seed = testing::fresh_seed();
  std::string root = make_temp_dir("folder-split");
  make_dir(root + "/train");
  make_dir(root + "/train/x");
  write_file(root + "/train/x/1.png", testdata::encode_png(testdata::smooth_image(4, 4, 3, seed)));
  EXPECT_EQ(open_dataset("folder:" + root, true)->size(), 1);
  expect_error<IoError>([&] { open_dataset("folder:" + root, false); }, {"no val/ or test/"});
  make_dir(root + "/val");
  make_dir(root + "/val/x");
  make_dir(root + "/val/y");
  write_file(root + "/val/x/1.png", testdata::encode_png(testdata::smooth_image(4, 4, 3, seed)));
  expect_error<IoError>([&] { open_dataset("folder:" + root, false); }, {root + "/val/y", "no .jpg"});
  write_file(root + "/val/y/bad.jpg", {0xFF, 0xD8, 0xFF, 0xDB, 1, 2, 3, 4, 5});
  auto val = open_dataset("folder:" + root, false);
  ASSERT_EQ(val->size(), 2);
  expect_error<IoError>([&] { val->get(1); }, {root + "/val/y/bad.jpg", "JPEG"});
  std::string empty = make_temp_dir("folder-empty");
  expect_error<IoError>([&] { open_dataset("folder:" + empty, true); }, {"no class subfolders"});
}

// ---- Packed records ----

// Writes two shards: raw, JPEG and PNG records, and returns the pixels a reader must give and the labels.
struct PackedFixture {
  std::string prefix;
  std::vector<Image> images;
  std::vector<int64_t> labels;
};

PackedFixture write_packed(uint64_t seed) {
  PackedFixture f;
  f.prefix = make_temp_dir("packed") + "/train";
  for (int shard = 0; shard < 2; ++shard) {
    RecordWriter w(shard_path(f.prefix, shard, 2), shard, 2, 7, {"a", "b", "c", "d", "e", "f", "g"});
    for (int i = 0; i < 3 + shard; ++i) {
      Image im = testdata::smooth_image(9 + i, 12, i == 2 ? 1 : 3, seed + 10 * shard + i);
      int64_t label = (shard * 5 + i * 3) % 7;
      if (i % 3 == 0) {
        w.add(im, label);
      } else if (i % 3 == 1) {
        auto png = testdata::encode_png(im);
        w.add(png.data(), png.size(), label, im.height, im.width, im.channels, RecordEncoding::Png);
      } else {
        auto jpg = testdata::encode_jpeg(im, 95);
        w.add(jpg.data(), jpg.size(), label, im.height, im.width, im.channels, RecordEncoding::Jpeg);
        im = testdata::reference_decode_jpeg(jpg);
      }
      f.images.push_back(im);
      f.labels.push_back(label);
    }
    w.finish();
  }
  return f;
}

TEST(Packed, RoundTripsRawJpegAndPngRecords) {
  PackedFixture f = write_packed(testing::fresh_seed());
  for (const std::string& spec : {"packed:" + f.prefix, "packed:" + f.prefix.substr(0, f.prefix.rfind('/'))}) {
    auto ds = open_dataset(spec, true);
    ASSERT_EQ(ds->size(), 7) << spec;
    EXPECT_EQ(ds->num_classes(), 7);
    for (int64_t i = 6; i >= 0; --i) {  // random access, any order
      Sample s = ds->get(i);
      EXPECT_EQ(s.label, f.labels[i]);
      ASSERT_EQ(s.image.channels, f.images[i].channels);
      ASSERT_EQ(s.image.height, f.images[i].height);
      EXPECT_EQ(s.image.hwc, f.images[i].hwc) << "record " << i;
    }
  }
  auto one = open_dataset("packed:" + shard_path(f.prefix, 1, 2), true);
  EXPECT_EQ(one->size(), 4);
  expect_error<IoError>([&] { open_dataset("packed:" + f.prefix.substr(0, f.prefix.rfind('/')), false); },
                        {"val-*.tdrec"});
}

uint32_t crc(const std::vector<uint8_t>& b, size_t begin, size_t end) {
  return static_cast<uint32_t>(::crc32(0, b.data() + begin, static_cast<uInt>(end - begin)));
}
void put32(std::vector<uint8_t>& b, size_t at, uint32_t v) {
  for (int i = 0; i < 4; ++i) b[at + i] = static_cast<uint8_t>(v >> (8 * i));
}
uint64_t get64(const std::vector<uint8_t>& b, size_t at) {
  uint64_t v = 0;
  for (int i = 7; i >= 0; --i) v = (v << 8) | b[at + i];
  return v;
}

TEST(Packed, CorruptShardsNameTheFileAndRecord) {
  PackedFixture f = write_packed(testing::fresh_seed());
  const std::string path = shard_path(f.prefix, 1, 2);
  const auto good = testdata::read_bytes(path);
  auto open_all = [&] {
    auto ds = open_dataset("packed:" + f.prefix, true);
    for (int64_t i = 0; i < ds->size(); ++i) ds->get(i);
  };
  const uint64_t index_offset = get64(good, 32);

  auto bad = good;
  bad[0] = 'X';
  write_file(path, bad);
  expect_error<IoError>(open_all, {path, "wrong magic"});

  bad = good;
  bad.resize(bad.size() - 10);
  write_file(path, bad);
  expect_error<IoError>(open_all, {path, "truncated"});

  bad = good;
  bad.resize(30);
  write_file(path, bad);
  expect_error<IoError>(open_all, {path, "truncated"});

  // A flipped payload byte of record 1 (the index still matches): caught by the record checksum.
  bad = good;
  const uint64_t rec1 = get64(good, index_offset + 32);
  bad[rec1 + 5] ^= 0x40;
  write_file(path, bad);
  expect_error<IoError>(open_all, {path + " record 1", "checksum"});

  // A label out of range, with the index checksum recomputed as a buggy writer would.
  bad = good;
  put32(bad, index_offset + 2 * 32 + 16, 7);
  put32(bad, bad.size() - 4, crc(bad, index_offset, bad.size() - 4));
  write_file(path, bad);
  expect_error<IoError>(open_all, {path, "record 2", "label 7"});

  // The same change without a new checksum: the index is corrupt.
  bad = good;
  put32(bad, index_offset + 2 * 32 + 16, 7);
  write_file(path, bad);
  expect_error<IoError>(open_all, {path, "corrupt index"});

  // A header field changed: header checksum.
  bad = good;
  bad[20] = 9;
  write_file(path, bad);
  expect_error<IoError>(open_all, {path, "corrupt header"});

  // A garbage JPEG with a valid checksum: the decoder's error names the record.
  {
    const std::string dir = make_temp_dir("packed-jpeg");
    RecordWriter w(dir + "/x.tdrec", 0, 1, 2);
    std::vector<uint8_t> junk = {0xFF, 0xD8, 0xFF, 0xDB, 9, 9, 9, 9};
    w.add(junk.data(), junk.size(), 1, 8, 8, 3, RecordEncoding::Jpeg);
    w.finish();
    auto ds = open_dataset("packed:" + dir + "/x.tdrec", true);
    expect_error<IoError>([&] { ds->get(0); }, {dir + "/x.tdrec record 0", "JPEG"});
  }

  write_file(path, good);
  std::remove(shard_path(f.prefix, 0, 2).c_str());
  expect_error<IoError>(open_all, {shard_path(f.prefix, 0, 2), "missing"});
}

TEST(Packed, WriterRejectsBadRecords) {
  const std::string dir = make_temp_dir("packed-writer");
  RecordWriter w(dir + "/x.tdrec", 0, 1, 3);
  std::vector<uint8_t> px(12, 1);
  EXPECT_THROW(w.add(px.data(), px.size(), 3, 2, 2, 3, RecordEncoding::Raw), ValueError);  // label
  EXPECT_THROW(w.add(px.data(), px.size(), 0, 2, 3, 3, RecordEncoding::Raw), ValueError);  // size
  EXPECT_THROW(w.add(px.data(), px.size(), 0, 2, 2, 2, RecordEncoding::Raw), ValueError);  // channels
}

}  // namespace
}  // namespace data
}  // namespace tandem
