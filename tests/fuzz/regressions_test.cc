// Replays every input the fuzzers ever crashed on (tests/fuzz/regressions/<reader>/) through its reader: each
// must now be refused with a Tandem error, with no allocation larger than the file justifies; and the seed
// inputs must be accepted (the harness reads well-formed files).
#include <dirent.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <new>
#include <string>
#include <typeinfo>
#include <vector>

#include "runtime/base/error.h"
#include "tests/data_loading/dataset_files.h"
#include "tests/fuzz/fuzz_readers.h"

// The largest single operator-new allocation while watching (libjpeg's and libpng's own mallocs are not seen
// here; the fuzz runs bound those with libFuzzer's -malloc_limit_mb).
namespace {
std::atomic<bool> g_watching{false};
std::atomic<size_t> g_largest{0};
}  // namespace

void* operator new(size_t n) {
  if (g_watching.load(std::memory_order_relaxed)) {
    size_t seen = g_largest.load(std::memory_order_relaxed);
    while (n > seen && !g_largest.compare_exchange_weak(seen, n)) {
    }
  }
  void* p = std::malloc(n != 0 ? n : 1);
  if (p == nullptr) throw std::bad_alloc();
  return p;
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace tandem {
namespace fuzz {
namespace {

// Bytes a reader may allocate at once per byte of input, beyond a fixed 1 MiB: gzip-compressed files (IDX,
// CIFAR, image folder files) expand up to about 1,032 times, and the vector growing to hold them may double;
// images decode to at most 2^14 pixels of 3 bytes per file byte (data/image_codec.cc); the others hold the file
// itself, once or twice.
size_t allowed_per_byte(const std::string& reader) {
  if (reader == "image" || reader == "packed") return 3 << 14;
  if (reader == "idx" || reader == "cifar") return 4096;
  return 16;
}

std::vector<std::string> files_in(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = ::opendir(dir.c_str())) {
    while (dirent* e = ::readdir(d))
      if (e->d_name[0] != '.') out.push_back(dir + "/" + e->d_name);
    ::closedir(d);
  }
  return out;
}

// Reads one input, watching its allocations; fails the test when one exceeds what the input justifies.
Outcome replay(const std::string& reader, const std::vector<uint8_t>& bytes, const std::string& what) {
  g_largest = 0;
  g_watching = true;
  Outcome out;
  try {
    out = read_input(reader, bytes.data(), bytes.size());
  } catch (const std::exception& e) {
    g_watching = false;
    ADD_FAILURE() << what << ": escaped the reader as a " << typeid(e).name() << ": " << e.what();
    return out;
  }
  g_watching = false;
  const size_t limit = (size_t{1} << 20) + allowed_per_byte(reader) * bytes.size();
  EXPECT_LE(g_largest.load(), limit) << what << ": an allocation of " << g_largest.load() << " bytes for a "
                                     << bytes.size() << "-byte input";
  return out;
}

void replay_reader(const std::string& reader) {
  for (const auto& seed : seed_inputs(reader)) {
    Outcome out = replay(reader, seed.second, reader + " seed " + seed.first);
    EXPECT_TRUE(out.accepted) << reader << " seed " << seed.first << " refused: " << out.error;
  }
  for (const std::string& path : files_in("tests/fuzz/regressions/" + reader)) {
    Outcome out = replay(reader, testdata::read_bytes(path), path);
    EXPECT_FALSE(out.accepted) << path << " was accepted; the regression cases are all malformed";
    EXPECT_FALSE(out.error.empty()) << path;
  }
}

TEST(FuzzRegressions, Idx) { replay_reader("idx"); }
TEST(FuzzRegressions, Cifar) { replay_reader("cifar"); }
TEST(FuzzRegressions, Image) { replay_reader("image"); }
TEST(FuzzRegressions, Packed) { replay_reader("packed"); }
TEST(FuzzRegressions, Safetensors) { replay_reader("safetensors"); }
TEST(FuzzRegressions, Checkpoint) { replay_reader("checkpoint"); }
TEST(FuzzRegressions, Spec) { replay_reader("spec"); }

TEST(FuzzRegressions, EveryReaderHasATestAndTheCasesAreThere) {
  EXPECT_EQ(reader_names(),
            (std::vector<std::string>{"idx", "cifar", "image", "packed", "safetensors", "checkpoint", "spec"}));
  // The folder travels with the test (Bazel data): the hand-made case of the first overflow bug is in it.
  const std::vector<std::string> idx = files_in("tests/fuzz/regressions/idx");
  EXPECT_NE(std::find(idx.begin(), idx.end(), "tests/fuzz/regressions/idx/crafted-dims-wrap-to-zero"), idx.end());
}

// The checks above are live: an oversized allocation is seen, and a non-Tandem exception is not swallowed.
TEST(FuzzRegressions, CheckersCatchWhatTheyGuard) {
  g_largest = 0;
  g_watching = true;
  {
    std::vector<uint8_t> big(3 << 20);
    EXPECT_EQ(big.size(), size_t{3} << 20);
  }
  g_watching = false;
  EXPECT_GE(g_largest.load(), size_t{3} << 20);
  EXPECT_THROW(read_input("no-such-reader", nullptr, 0), InternalError);
}

}  // namespace
}  // namespace fuzz
}  // namespace tandem
