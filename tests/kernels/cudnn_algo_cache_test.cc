// The disk cache of cuDNN convolution algorithm choices (kernels/cudnn/algo_cache.h): entries come back in a later
// run, a corrupt or unreadable file is ignored with one warning, another GPU, driver or cuDNN misses, and
// concurrent writers leave a whole file. Runs everywhere (no GPU is used).
#include <gtest/gtest.h>
#include <sys/stat.h>

#include <cstdlib>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "kernels/cudnn/algo_cache.h"
#include "tests/testing.h"

namespace tandem {
namespace cudnn {
namespace {

// A fresh path for each test's cache file.
std::string fresh_path(const std::string& name) {
  return ::testing::TempDir() + "algo_cache_" + name + "_" + std::to_string(testing::fresh_seed()) + "/algos.json";
}

AlgoContext h200() {
  AlgoContext c;
  c.gpu = "NVIDIA H200";
  c.driver = 13000;
  c.cudnn = 91900;
  return c;
}

// Keeps the warnings a cache gives.
struct Warnings {
  std::vector<std::string> said;
  AlgoDiskCache::Warn sink() {
    return [this](const std::string& why) { said.push_back(why); };
  }
};

void write_file(const std::string& path, const std::string& text) { std::ofstream(path) << text; }

TEST(CudnnAlgoCache, ChoicesComeBackInALaterRun) {
  const std::string path = fresh_path("round_trip");
  std::mt19937_64 g(testing::fresh_seed());
  std::vector<std::pair<std::string, StoredAlgo>> kept;
  Warnings w;
  {
    AlgoDiskCache run(path, w.sink());
    EXPECT_FALSE(run.lookup(h200(), "nothing yet").has_value());
    for (int i = 0; i < 20; ++i) {
      StoredAlgo a;
      a.algo = static_cast<int>(g() % 8);
      a.math = static_cast<int>(g() % 4);
      kept.push_back({"problem " + std::to_string(g()), a});
      run.store(h200(), kept.back().first, a);
    }
    // The process that stored them finds them too.
    const std::optional<StoredAlgo> first = run.lookup(h200(), kept[0].first);
    ASSERT_TRUE(first.has_value());
    EXPECT_EQ(first->algo, kept[0].second.algo);
  }
  AlgoDiskCache later(path, w.sink());
  for (const auto& k : kept) {
    const std::optional<StoredAlgo> got = later.lookup(h200(), k.first);
    ASSERT_TRUE(got.has_value()) << k.first;
    EXPECT_EQ(got->algo, k.second.algo) << k.first;
    EXPECT_EQ(got->math, k.second.math) << k.first;
  }
  EXPECT_FALSE(later.lookup(h200(), "another problem").has_value());
  EXPECT_TRUE(w.said.empty()) << w.said[0];
}

TEST(CudnnAlgoCache, AnotherGpuDriverOrCudnnMisses) {
  const std::string path = fresh_path("versions");
  AlgoDiskCache(path).store(h200(), "conv", {1, 2});
  AlgoDiskCache later(path);
  ASSERT_TRUE(later.lookup(h200(), "conv").has_value());
  AlgoContext newer_cudnn = h200();
  newer_cudnn.cudnn = 92000;
  EXPECT_FALSE(later.lookup(newer_cudnn, "conv").has_value());
  AlgoContext other_driver = h200();
  other_driver.driver = 12080;
  EXPECT_FALSE(later.lookup(other_driver, "conv").has_value());
  AlgoContext other_gpu = h200();
  other_gpu.gpu = "NVIDIA H100 80GB HBM3";
  EXPECT_FALSE(later.lookup(other_gpu, "conv").has_value());
}

TEST(CudnnAlgoCache, ACorruptFileIsIgnoredWithOneWarningAndReplaced) {
  const std::vector<std::string> bad = {
      "{\"format\": \"tandem cuDNN convolution algorithms\", \"version\": 1, \"entries\": {\"k\": {\"algo\": 1",
      "not json at all",
      "[1, 2, 3]",
      "{\"format\": \"something else\", \"version\": 1, \"entries\": {}}",
      "{\"format\": \"tandem cuDNN convolution algorithms\", \"version\": 99, \"entries\": {}}",
      "{\"format\": \"tandem cuDNN convolution algorithms\", \"version\": 1, \"entries\": {\"k\": {\"algo\": \"x\", "
      "\"math\": 0}}}",
      std::string("\0\xff\xfe garbage", 12),
  };
  for (const std::string& text : bad) {
    const std::string path = fresh_path("corrupt");
    AlgoDiskCache(path).store(h200(), "setup", {0, 0});  // makes the folder
    write_file(path, text);
    Warnings w;
    AlgoDiskCache cache(path, w.sink());
    EXPECT_FALSE(cache.lookup(h200(), "setup").has_value()) << text;
    EXPECT_FALSE(cache.lookup(h200(), "other").has_value()) << text;
    cache.store(h200(), "new", {3, 1});
    cache.store(h200(), "newer", {4, 1});
    ASSERT_EQ(w.said.size(), 1u) << text;
    EXPECT_NE(w.said[0].find("ignoring the cuDNN algorithm cache " + path), std::string::npos) << w.said[0];
    // The file is whole again, with what was stored since.
    Warnings again;
    AlgoDiskCache later(path, again.sink());
    const std::optional<StoredAlgo> got = later.lookup(h200(), "newer");
    ASSERT_TRUE(got.has_value()) << text;
    EXPECT_EQ(got->algo, 4);
    EXPECT_TRUE(later.lookup(h200(), "new").has_value());
    EXPECT_TRUE(again.said.empty()) << again.said[0];
  }
}

TEST(CudnnAlgoCache, AnUnwritablePlaceWarnsOnceAndKeepsWorking) {
  // A folder where the file should be: it can be neither read nor replaced.
  const std::string path = fresh_path("unwritable");
  AlgoDiskCache(path).store(h200(), "setup", {0, 0});
  ASSERT_EQ(std::remove(path.c_str()), 0);
  ASSERT_EQ(::mkdir(path.c_str(), 0755), 0);
  Warnings w;
  AlgoDiskCache cache(path, w.sink());
  EXPECT_FALSE(cache.lookup(h200(), "a").has_value());
  cache.store(h200(), "a", {1, 0});
  cache.store(h200(), "b", {2, 0});
  EXPECT_EQ(w.said.size(), 1u);
  // What this process stored is still found.
  ASSERT_TRUE(cache.lookup(h200(), "b").has_value());
  EXPECT_EQ(cache.lookup(h200(), "b")->algo, 2);
}

// Writers in parallel (each its own cache object, as separate processes have): the file is always one writer's
// whole text, never a mix, and the last writer's entries are all in it.
TEST(CudnnAlgoCache, ConcurrentWritersLeaveAWholeFile) {
  const std::string path = fresh_path("concurrent");
  constexpr int kWriters = 4, kEntries = 25;
  std::vector<Warnings> warnings(kWriters);
  std::vector<std::thread> threads;
  for (int t = 0; t < kWriters; ++t)
    threads.emplace_back([&, t] {
      AlgoDiskCache cache(path, warnings[t].sink());
      for (int i = 0; i < kEntries; ++i)
        cache.store(h200(), "writer " + std::to_string(t) + " entry " + std::to_string(i), {t, i % 4});
    });
  for (std::thread& t : threads) t.join();
  for (const Warnings& w : warnings) EXPECT_TRUE(w.said.empty()) << w.said[0];
  Warnings read;
  AlgoDiskCache after(path, read.sink());
  int complete_writers = 0;
  for (int t = 0; t < kWriters; ++t) {
    int found = 0;
    for (int i = 0; i < kEntries; ++i) {
      const std::optional<StoredAlgo> got =
          after.lookup(h200(), "writer " + std::to_string(t) + " entry " + std::to_string(i));
      if (!got) continue;
      ++found;
      EXPECT_EQ(got->algo, t);
      EXPECT_EQ(got->math, i % 4);
    }
    complete_writers += found == kEntries;
  }
  EXPECT_GE(complete_writers, 1) << "the last writer's entries are missing";
  EXPECT_TRUE(read.said.empty()) << read.said[0];
}

TEST(CudnnAlgoCache, ThePathFollowsTheEnvironment) {
  struct Saved {
    std::string name, value;
    bool set;
  };
  std::vector<Saved> saved;
  for (const char* name : {"TANDEM_CACHE_DIR", "HOME", "TANDEM_CUDNN_CACHE"}) {
    const char* v = std::getenv(name);
    saved.push_back({name, v ? v : "", v != nullptr});
  }
  ::unsetenv("TANDEM_CUDNN_CACHE");
  ::setenv("TANDEM_CACHE_DIR", "/some/cache", 1);
  ::setenv("HOME", "/home/user", 1);
  EXPECT_EQ(default_algo_cache_path(), "/some/cache/cudnn-conv-algos.json");
  ::unsetenv("TANDEM_CACHE_DIR");
  EXPECT_EQ(default_algo_cache_path(), "/home/user/.cache/tandem/cudnn-conv-algos.json");
  ::setenv("TANDEM_CUDNN_CACHE", "0", 1);
  EXPECT_EQ(default_algo_cache_path(), "");
  for (const Saved& s : saved) {
    if (s.set)
      ::setenv(s.name.c_str(), s.value.c_str(), 1);
    else
      ::unsetenv(s.name.c_str());
  }
  // No path keeps nothing and says nothing.
  Warnings w;
  AlgoDiskCache none("", w.sink());
  none.store(h200(), "conv", {1, 1});
  EXPECT_FALSE(none.lookup(h200(), "conv").has_value());
  EXPECT_TRUE(w.said.empty());
}

}  // namespace
}  // namespace cudnn
}  // namespace tandem
