// tools:pack end to end: --help, usage errors, packing an image folder and a CIFAR-like dataset, a bad image.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "data/dataset.h"
#include "data/file_io.h"
#include "tests/data_loading/dataset_files.h"
#include "tests/testing.h"

namespace tandem {
namespace data {
namespace {

struct Result {
  int rc;
  std::string output;  // stdout and stderr
};

// Runs the pack binary from the test's runfiles with `args`.
Result pack(const std::string& args) {
  const char* srcdir = std::getenv("TEST_SRCDIR");
  std::string bin = std::string(srcdir != nullptr ? srcdir : ".") + "/tandem/tools/pack/pack";
  std::string cmd = bin + " " + args + " 2>&1";
  Result r;
  std::FILE* p = popen(cmd.c_str(), "r");
  EXPECT_NE(p, nullptr);
  char buf[4096];
  size_t n;
  while ((n = std::fread(buf, 1, sizeof(buf), p)) > 0) r.output.append(buf, n);
  int status = pclose(p);
  r.rc = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return r;
}

// Runs pack with `args`: EXPECTs exit code `rc` and every one of `parts` in its output.
void expect_pack(const std::string& args, int rc, const std::vector<std::string>& parts) {
  const Result r = pack(args);
  EXPECT_EQ(r.rc, rc) << "pack " << args << ": " << r.output;
  for (const std::string& p : parts)
    EXPECT_NE(r.output.find(p), std::string::npos) << "pack " << args << ": " << r.output;
}

TEST(PackTool, HelpAndUsageErrors) {
  expect_pack("--help", 0, {"usage: pack --input SPEC --output PREFIX"});
  expect_pack("", 2, {"--input is required", "run pack --help"});
  expect_pack("--input synthetic --output /tmp/x --shards zero", 2, {"--shards needs an integer >= 1, got 'zero'"});
  expect_pack("--input synthetic --output /tmp/x --colour 3", 2, {"unknown flag '--colour'"});
  expect_pack("--input cifar10:/nonexistent/cifar --output /tmp/x", 1, {"/nonexistent/cifar"});
}

TEST(PackTool, PacksAnImageFolderIntoEquivalentShards) {
  uint64_t seed = testing::fresh_seed();
  const std::string root = testdata::make_temp_dir("pack-folder");
  const std::string images = root + "/images", out = root + "/packed";
  testdata::make_dir(images);
  testdata::make_dir(out);
  for (const char* cls : {"dog", "cat"}) {
    testdata::make_dir(images + "/" + cls);
    for (int i = 0; i < 4; ++i) {
      Image im = testdata::smooth_image(10 + i, 14, i == 3 ? 1 : 3, seed + i + (cls[0] == 'd' ? 100 : 0));
      std::string base = images + "/" + cls + "/" + std::to_string(i);
      if (i % 2 == 0)
        testdata::write_file(base + ".jpg", testdata::encode_jpeg(im, 90));
      else
        testdata::write_file(base + ".png", testdata::encode_png(im));
    }
  }
  Result r = pack("--input folder:" + images + " --output " + out + "/train --shards 3");
  ASSERT_EQ(r.rc, 0) << r.output;
  EXPECT_TRUE(path_exists(out + "/train-00002-of-00003.tdrec"));
  auto folder = open_dataset("folder:" + images, true), packed = open_dataset("packed:" + out, true);
  ASSERT_EQ(packed->size(), folder->size());
  EXPECT_EQ(packed->num_classes(), 2);
  for (int64_t i = 0; i < folder->size(); ++i) {
    Sample a = folder->get(i), b = packed->get(i);
    EXPECT_EQ(a.label, b.label) << i;
    EXPECT_EQ(a.image.height, b.image.height) << i;
    EXPECT_EQ(a.image.channels, 3);
    EXPECT_EQ(a.image.hwc, b.image.hwc) << i;  // the same bytes decoded the same way
  }
  // Raw records from another format, split by size.
  Result raw = pack("--input synthetic:n=50,h=6,w=5,seed=3 --output " + out + "/val --shard-mb 1");
  ASSERT_EQ(raw.rc, 0) << raw.output;
  auto syn = open_dataset("synthetic:n=50,h=6,w=5,seed=3", true), val = open_dataset("packed:" + out, false);
  ASSERT_EQ(val->size(), 50);
  EXPECT_EQ(val->get(49).image.hwc, syn->get(49).image.hwc);
  EXPECT_EQ(val->get(49).label, syn->get(49).label);
  // An undecodable image stops the packing with its name, and leaves no shard behind.
  testdata::write_file(images + "/cat/9.jpg", {0xFF, 0xD8, 0xFF, 0xE0, 1, 2, 3});
  expect_pack("--input folder:" + images + " --output " + out + "/bad --shards 1", 1, {images + "/cat/9.jpg"});
  EXPECT_FALSE(path_exists(out + "/bad-00000-of-00001.tdrec"));
  EXPECT_FALSE(path_exists(out + "/bad-00000-of-00001.tdrec.tmp"));
}

}  // namespace
}  // namespace data
}  // namespace tandem
