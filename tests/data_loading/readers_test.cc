// Dataset readers: IDX (plain, gzip, installed Fashion-MNIST), CIFAR-10/100, open_dataset specs and their errors.
#include <gtest/gtest.h>
#include <zlib.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/file_io.h"
#include "data/idx.h"
#include "runtime/base/error.h"
#include "runtime/base/philox.h"
#include "tests/data_loading/dataset_files.h"
#include "tests/testing.h"

namespace tandem {
namespace data {
namespace {

using tandem::testing::expect_error;
using testdata::make_temp_dir;
using testdata::write_file;

std::vector<uint8_t> random_bytes(size_t n, uint64_t seed, uint32_t bound = 256) {
  std::vector<uint8_t> v(n);
  for (size_t i = 0; i < n; ++i) v[i] = static_cast<uint8_t>(philox::generate(seed, i).x[0] % bound);
  return v;
}

// ---- IDX ----

struct IdxFixture {
  std::string dir;
  std::vector<uint8_t> pixels, labels;
  int64_t n = 37, rows = 5, cols = 7;
};

IdxFixture write_idx(bool gz, uint64_t seed) {
  IdxFixture f;
  f.dir = make_temp_dir("idx");
  f.pixels = random_bytes(static_cast<size_t>(f.n * f.rows * f.cols), seed);
  f.labels = random_bytes(static_cast<size_t>(f.n), seed + 1, 10);
  auto put = gz ? testdata::write_gzip : testdata::write_file;
  const std::string ext = gz ? ".gz" : "";
  put(f.dir + "/train-images-idx3-ubyte" + ext, testdata::idx_images(f.n, f.rows, f.cols, f.pixels));
  put(f.dir + "/train-labels-idx1-ubyte" + ext, testdata::idx_labels(f.labels));
  return f;
}

TEST(Idx, ReadsPlainAndGzipFiles) {
  for (bool gz : {false, true}) {
    IdxFixture f = write_idx(gz, testing::fresh_seed());
    auto ds = open_dataset("mnist:" + f.dir, true);
    ASSERT_EQ(ds->size(), f.n);
    EXPECT_EQ(ds->num_classes(), 10);
    EXPECT_NE(ds->describe().find("37 images 5x7x1"), std::string::npos) << ds->describe();
    for (int64_t i = 0; i < f.n; ++i) {
      Sample s = ds->get(i);
      EXPECT_EQ(s.label, f.labels[i]);
      ASSERT_EQ(s.image.height, 5);
      ASSERT_EQ(s.image.width, 7);
      ASSERT_EQ(s.image.channels, 1);
      for (int64_t p = 0; p < 35; ++p) ASSERT_EQ(s.image.hwc[p], f.pixels[i * 35 + p]) << "image " << i;
    }
    EXPECT_THROW(ds->get(f.n), IndexError);
    expect_error<IoError>([&] { open_dataset("idx:" + f.dir, false); }, {"t10k-images", f.dir});
  }
}

TEST(Idx, CorruptFilesNameTheFileAndTheProblem) {
  IdxFixture f = write_idx(false, testing::fresh_seed());
  const std::string images = f.dir + "/train-images-idx3-ubyte", labels = f.dir + "/train-labels-idx1-ubyte";
  auto good_images = testdata::read_bytes(images), good_labels = testdata::read_bytes(labels);
  auto open = [&] { open_dataset("idx:" + f.dir, true); };

  auto bad = good_images;
  bad[2] = 0x0D;  // f64 elements
  write_file(images, bad);
  expect_error<IoError>(open, {images, "wrong magic"});

  bad = good_images;
  bad.resize(bad.size() - 3);
  write_file(images, bad);
  expect_error<IoError>(open, {images, "truncated"});

  bad = good_images;
  bad.push_back(1);
  write_file(images, bad);
  expect_error<IoError>(open, {images, "unexpected bytes"});
  write_file(images, good_images);

  auto bad_labels = good_labels;
  bad_labels[8 + 11] = 10;
  write_file(labels, bad_labels);
  expect_error<IoError>(open, {labels, "record 11", "label 10"});

  write_file(labels, testdata::idx_labels(std::vector<uint8_t>(f.labels.begin(), f.labels.end() - 1)));
  expect_error<IoError>(open, {"37 images", "36 labels"});

  // A truncated gzip stream.
  write_file(labels, good_labels);
  testdata::write_gzip(images + ".tmp.gz", good_images);
  auto gz = testdata::read_bytes(images + ".tmp.gz");
  gz.resize(gz.size() / 2);
  std::remove(images.c_str());
  write_file(images + ".gz", gz);
  expect_error<IoError>(open, {images + ".gz", "truncated gzip"});
  // Corrupt deflate data.
  gz = testdata::read_bytes(images + ".tmp.gz");
  for (size_t i = 12; i < 40 && i < gz.size(); ++i) gz[i] ^= 0x5A;
  write_file(images + ".gz", gz);
  expect_error<IoError>(open, {images + ".gz", "gzip"});

  std::remove((images + ".gz").c_str());
  expect_error<IoError>(open, {"train-images-idx3-ubyte", f.dir});
}

// Dimensions whose product wraps past 2^64: 4 x 2^31 x 2^31 is 2^64, 0 modulo 2^64, which once matched an
// empty data section and handed out 2^62-byte images.
TEST(Idx, DimensionsThatOverflowAreRefused) {
  const std::string dir = testdata::make_temp_dir("idx-overflow");
  std::vector<uint8_t> images = {0, 0, 8, 3, 0, 0, 0, 4, 0x80, 0, 0, 0, 0x80, 0, 0, 0};
  write_file(dir + "/train-images-idx3-ubyte", images);
  write_file(dir + "/train-labels-idx1-ubyte", testdata::idx_labels({1, 2, 3, 4}));
  expect_error<IoError>([&] { open_dataset("idx:" + dir, true); },
                        {dir + "/train-images-idx3-ubyte", "dimensions multiply past 2^64", "does not fit in 64 bits"});
}

// Decompresses a gzip file with zlib's gzread, independently of the reader under test.
std::vector<uint8_t> gunzip_file(const std::string& path) {
  gzFile g = gzopen(path.c_str(), "rb");
  EXPECT_NE(g, nullptr);
  std::vector<uint8_t> out;
  uint8_t buf[1 << 16];
  int n;
  while ((n = gzread(g, buf, sizeof(buf))) > 0) out.insert(out.end(), buf, buf + n);
  gzclose(g);
  return out;
}

TEST(FashionMnist, ReadsTheInstalledPackage) {
  const std::string dir = fashion_mnist_dir();
  if (!path_exists(dir + "/train-labels-idx1-ubyte.gz"))
    GTEST_SKIP() << "dataset-fashion-mnist is not installed (" << dir << ")";
  struct Split {
    bool train;
    const char* prefix;
    int64_t count;
    std::vector<int64_t> first_labels;
  };
  const std::vector<Split> splits = {{true, "train", 60000, {9, 0, 0, 3, 0, 2, 7, 2, 5, 5}},
                                     {false, "t10k", 10000, {9, 2, 1, 1, 6, 1, 4, 6, 5, 7}}};
  for (const Split& sp : splits) {
    auto ds = open_dataset("fashion-mnist", sp.train);
    ASSERT_EQ(ds->size(), sp.count);
    EXPECT_EQ(ds->num_classes(), 10);
    std::vector<uint8_t> labels = gunzip_file(dir + "/" + sp.prefix + "-labels-idx1-ubyte.gz");
    std::vector<uint8_t> images = gunzip_file(dir + "/" + sp.prefix + "-images-idx3-ubyte.gz");
    ASSERT_EQ(images.size(), 16 + static_cast<size_t>(sp.count) * 784);
    // Checksums weighted by position, so a reordering or an offset error shows.
    uint64_t expected = 0, got = 0;
    for (size_t i = 16; i < images.size(); ++i) expected += images[i] * ((i - 16) % 251 + 1);
    for (int64_t i = 0; i < sp.count; ++i) {
      Sample s = ds->get(i);
      ASSERT_EQ(s.image.hwc.size(), 784u);
      ASSERT_EQ(s.label, labels[8 + i]) << "sample " << i;
      if (i < 10) {
        EXPECT_EQ(s.label, sp.first_labels[i]) << sp.prefix << " sample " << i;
      }
      for (size_t p = 0; p < 784; ++p) got += s.image.hwc[p] * ((i * 784 + p) % 251 + 1);
    }
    EXPECT_EQ(got, expected) << sp.prefix;
  }
}

TEST(FashionMnist, MissingPackageNamesIt) {
  const char* old = std::getenv("TANDEM_FASHION_MNIST_DIR");
  std::string saved = old != nullptr ? old : "";
  setenv("TANDEM_FASHION_MNIST_DIR", "/nonexistent/fashion", 1);
  expect_error<IoError>([] { open_dataset("fashion-mnist", true); },
                        {"/nonexistent/fashion", "dataset-fashion-mnist", "TANDEM_FASHION_MNIST_DIR"});
  if (old != nullptr)
    setenv("TANDEM_FASHION_MNIST_DIR", saved.c_str(), 1);
  else
    unsetenv("TANDEM_FASHION_MNIST_DIR");
}

// ---- CIFAR ----

// Records with the given labels (1 or 2 label bytes) and random pixels.
std::vector<uint8_t> cifar_records(const std::vector<std::vector<uint8_t>>& labels, uint64_t seed) {
  std::vector<uint8_t> out;
  for (size_t i = 0; i < labels.size(); ++i) {
    out.insert(out.end(), labels[i].begin(), labels[i].end());
    auto px = random_bytes(3072, seed * 1000 + i);
    out.insert(out.end(), px.begin(), px.end());
  }
  return out;
}

TEST(Cifar, Cifar10ReadsAllBatchesAsHwc) {
  uint64_t seed = testing::fresh_seed();
  std::string dir = make_temp_dir("cifar10");
  std::string inner = dir + "/cifar-10-batches-bin";
  testdata::make_dir(inner);
  std::vector<std::vector<uint8_t>> files;
  for (int b = 0; b < 6; ++b) {
    std::vector<std::vector<uint8_t>> labels;
    for (int i = 0; i < 3 + b; ++i) labels.push_back({static_cast<uint8_t>((b * 7 + i) % 10)});
    files.push_back(cifar_records(labels, seed + b));
    write_file(inner + (b < 5 ? "/data_batch_" + std::to_string(b + 1) + ".bin" : "/test_batch.bin"), files.back());
  }
  auto train = open_dataset("cifar10:" + dir, true);
  auto test = open_dataset("cifar10:" + inner, false);
  EXPECT_EQ(train->size(), 3 + 4 + 5 + 6 + 7);
  EXPECT_EQ(test->size(), 8);
  EXPECT_EQ(train->num_classes(), 10);
  // Sample 9 is record 2 of data_batch_3 (3 + 4 records before it).
  Sample s = train->get(9);
  const uint8_t* rec = files[2].data() + 2 * 3073;
  EXPECT_EQ(s.label, rec[0]);
  ASSERT_EQ(s.image.channels, 3);
  for (int y = 0; y < 32; ++y)
    for (int x = 0; x < 32; ++x)
      for (int c = 0; c < 3; ++c) ASSERT_EQ(s.image.hwc[(y * 32 + x) * 3 + c], rec[1 + c * 1024 + y * 32 + x]);
  EXPECT_EQ(test->get(7).label, files[5][7 * 3073]);
}

TEST(Cifar, Cifar100UsesFineLabels) {
  uint64_t seed = testing::fresh_seed();
  std::string dir = make_temp_dir("cifar100");
  auto bytes = cifar_records({{3, 77}, {19, 99}, {0, 0}}, seed);
  write_file(dir + "/train.bin", bytes);
  auto ds = open_dataset("cifar100:" + dir, true);
  EXPECT_EQ(ds->num_classes(), 100);
  ASSERT_EQ(ds->size(), 3);
  EXPECT_EQ(ds->get(0).label, 77);
  EXPECT_EQ(ds->get(1).label, 99);
  EXPECT_EQ(ds->get(2).image.hwc[3 * 5 + 1], bytes[2 * 3074 + 2 + 1024 + 5]);
  expect_error<IoError>([&] { open_dataset("cifar100:" + dir, false); }, {"test.bin", dir});
}

TEST(Cifar, CorruptFilesNameTheFileAndRecord) {
  uint64_t seed = testing::fresh_seed();
  std::string dir = make_temp_dir("cifar-bad");
  std::vector<std::vector<uint8_t>> labels(4, std::vector<uint8_t>{1});
  auto good = cifar_records(labels, seed);
  for (int b = 1; b <= 5; ++b) write_file(dir + "/data_batch_" + std::to_string(b) + ".bin", good);
  const std::string third = dir + "/data_batch_3.bin";
  auto open = [&] { open_dataset("cifar10:" + dir, true); };
  auto bad = good;
  bad.resize(bad.size() - 100);
  write_file(third, bad);
  expect_error<IoError>(open, {third, "truncated"});
  bad = good;
  bad[2 * 3073] = 10;
  write_file(third, bad);
  expect_error<IoError>(open, {third, "record 2", "label 10"});
  std::remove(third.c_str());
  expect_error<IoError>(open, {third, "missing"});

  std::string dir100 = make_temp_dir("cifar100-bad");
  write_file(dir100 + "/train.bin", cifar_records({{1, 5}, {2, 100}}, seed));
  expect_error<IoError>([&] { open_dataset("cifar100:" + dir100, true); }, {"train.bin", "record 1", "label 100"});
  write_file(dir100 + "/train.bin", cifar_records({{20, 5}}, seed));
  expect_error<IoError>([&] { open_dataset("cifar100:" + dir100, true); }, {"train.bin", "record 0", "coarse"});
}

// ---- open_dataset ----

TEST(OpenDataset, RejectsUnknownSpecs) {
  expect_error<ValueError>([] { open_dataset("imagenet21k:/x", true); }, {"unknown kind 'imagenet21k'", "known"});
  expect_error<ValueError>([] { open_dataset("cifar10", true); }, {"cifar10:DIR"});
  expect_error<ValueError>([] { open_dataset("synthetic:n=abc", true); },
                           {"dataset spec 'synthetic:n=abc': n 'abc' is not an integer"});
  expect_error<ValueError>([] { open_dataset("synthetic:n=99999999999999999999", true); }, {"is not an integer"});
  expect_error<ValueError>([] { open_dataset("synthetic:seed=1.5", true); }, {"seed '1.5' is not an integer"});
  expect_error<ValueError>([] { open_dataset("synthetic:n=+4", true); }, {"n '+4' is not an integer"});
  expect_error<ValueError>([] { open_dataset("synthetic:n=4,,h=8", true); }, {"empty item 2"});
  expect_error<ValueError>([] { open_dataset("synthetic:colour=3", true); }, {"colour"});
  expect_error<ValueError>([] { open_dataset("synthetic:c=2", true); }, {"c must be 1 or 3"});
  expect_error<IoError>([] { open_dataset("folder:/nonexistent/images", true); }, {"/nonexistent/images"});
  expect_error<IoError>([] { open_dataset("packed:/nonexistent/shards", true); }, {"/nonexistent/shards"});
}

TEST(Synthetic, SeededAndClassSeparable) {
  uint64_t seed = testing::fresh_seed();
  const std::string spec = "synthetic:n=400,classes=5,h=12,w=10,c=3,seed=" + std::to_string(seed % 1000000);
  auto train = open_dataset(spec, true), again = open_dataset(spec, true), test = open_dataset(spec, false);
  EXPECT_EQ(train->size(), 400);
  EXPECT_EQ(train->num_classes(), 5);
  Sample a = train->get(17), b = again->get(17), c = test->get(17);
  EXPECT_EQ(a.image.hwc, b.image.hwc);
  EXPECT_EQ(a.label, b.label);
  EXPECT_NE(a.image.hwc, c.image.hwc);
  EXPECT_EQ(a.image.height, 12);
  EXPECT_EQ(a.image.width, 10);
  // Class means from train; nearest-mean classification of test must be nearly perfect.
  const size_t px = 12 * 10 * 3;
  std::vector<std::vector<double>> mean(5, std::vector<double>(px, 0.0));
  std::vector<int> count(5, 0);
  for (int64_t i = 0; i < train->size(); ++i) {
    Sample s = train->get(i);
    ++count[s.label];
    for (size_t p = 0; p < px; ++p) mean[s.label][p] += s.image.hwc[p];
  }
  for (int k = 0; k < 5; ++k) {
    ASSERT_GT(count[k], 40) << "class " << k << " is rare";
    for (double& m : mean[k]) m /= count[k];
  }
  int correct = 0;
  for (int64_t i = 0; i < 200; ++i) {
    Sample s = test->get(i);
    int best = -1;
    double best_d = 1e300;
    for (int k = 0; k < 5; ++k) {
      double d = 0;
      for (size_t p = 0; p < px; ++p) d += (s.image.hwc[p] - mean[k][p]) * (s.image.hwc[p] - mean[k][p]);
      if (d < best_d) {
        best_d = d;
        best = k;
      }
    }
    correct += best == s.label;
  }
  EXPECT_GE(correct, 195);
}

}  // namespace
}  // namespace data
}  // namespace tandem
