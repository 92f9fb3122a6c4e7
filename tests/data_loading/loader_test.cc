// Loader: determinism across runs and thread counts, shards, hybrid row splits, epochs, errors from workers.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/split.h"
#include "data/synthetic.h"
#include "runtime/base/error.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace data {
namespace {

std::shared_ptr<Dataset> synthetic(int64_t n, uint64_t seed, int64_t side = 8) {
  SyntheticOptions o;
  o.size = n;
  o.height = o.width = side;
  o.seed = seed;
  return make_synthetic(o, true);
}

// Every batch of `epochs` epochs, as host copies.
std::vector<Batch> drain(Loader& loader, int epochs) {
  std::vector<Batch> out;
  for (int e = 0; e < epochs; ++e) {
    while (auto b = loader.next()) {
      Batch copy = *b;
      copy.images = b->images.clone();
      copy.labels = b->labels.clone();
      out.push_back(copy);
    }
  }
  return out;
}

void expect_same(const std::vector<Batch>& a, const std::vector<Batch>& b) {
  ASSERT_EQ(a.size(), b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    EXPECT_EQ(a[i].epoch, b[i].epoch);
    EXPECT_EQ(a[i].index, b[i].index);
    testing::expect_bitwise_equal(a[i].images, b[i].images, "images of batch " + std::to_string(i));
    testing::expect_bitwise_equal(a[i].labels, b[i].labels, "labels of batch " + std::to_string(i));
  }
}

TEST(RowsFor, CoversTheBatchExactly) {
  EXPECT_EQ(rows_for(0, 3, 256).count, 86);
  EXPECT_EQ(rows_for(1, 3, 256).count, 85);
  EXPECT_EQ(rows_for(2, 3, 256).begin, 171);
  for (int64_t g = 1; g <= 9; ++g)
    for (int64_t rows : {0, 1, 5, 63, 64, 255, 256, 1001}) {
      int64_t next = 0, lo = rows, hi = 0;
      for (int64_t r = 0; r < g; ++r) {
        RowRange rr = rows_for(r, g, rows);
        EXPECT_EQ(rr.begin, next) << "rank " << r << " of " << g << ", " << rows << " rows";
        next = rr.end();
        lo = std::min(lo, rr.count);
        hi = std::max(hi, rr.count);
      }
      EXPECT_EQ(next, rows) << g << " ranks, " << rows << " rows";
      EXPECT_LE(hi - lo, 1);
    }
  EXPECT_THROW(rows_for(3, 3, 10), ValueError);
  EXPECT_THROW(rows_for(0, 0, 10), ValueError);
  EXPECT_THROW(rows_for(0, 2, -1), ValueError);
}

TEST(Loader, SameSeedSameBatchesForAnyThreadCount) {
  uint64_t seed = testing::fresh_seed();
  auto ds = synthetic(77, seed);
  std::vector<Batch> ref;
  for (int workers : {0, 1, 4}) {
    for (int run = 0; run < 2; ++run) {
      LoaderOptions o;
      o.batch_size = 10;
      o.drop_last = false;
      o.seed = seed;
      o.num_workers = workers;
      o.prefetch = 3;
      Loader loader(ds, Pipeline::parse("cifar-train,cutout:size=3"), o);
      std::vector<Batch> got = drain(loader, 2);
      ASSERT_EQ(got.size(), 16u);
      EXPECT_EQ(got.back().images.size(0), 7);
      if (ref.empty())
        ref = got;
      else
        expect_same(ref, got);
    }
  }
  // A different seed shuffles and augments differently.
  LoaderOptions o;
  o.batch_size = 10;
  o.drop_last = false;
  o.seed = seed + 1;
  Loader other(ds, Pipeline::parse("cifar-train"), o);
  auto b = other.next();
  EXPECT_NE(b->labels.to_vector<int64_t>(), ref[0].labels.to_vector<int64_t>());
}

TEST(Loader, EpochsArePermutationsAndDiffer) {
  uint64_t seed = testing::fresh_seed();
  auto ds = synthetic(50, seed);
  LoaderOptions o;
  o.batch_size = 50;
  o.seed = seed;
  o.num_workers = 2;
  Loader loader(ds, Pipeline(), o);
  EXPECT_EQ(loader.batches_per_epoch(), 1);
  // Identify samples by their label and pixels: compare each epoch's multiset of images to the dataset's.
  std::vector<std::vector<float>> epochs;
  for (int e = 0; e < 2; ++e) {
    EXPECT_EQ(loader.epoch(), e);
    auto b = loader.next();
    ASSERT_TRUE(b.has_value());
    EXPECT_EQ(b->epoch, e);
    EXPECT_FALSE(loader.next().has_value());
    epochs.push_back(b->images.to_vector<float>());
  }
  EXPECT_NE(epochs[0], epochs[1]);  // reshuffled
  const int64_t per = 3 * 8 * 8;
  for (const auto& flat : epochs) {
    std::multiset<std::vector<float>> seen, expected;
    for (int64_t i = 0; i < 50; ++i)
      seen.insert(std::vector<float>(flat.begin() + i * per, flat.begin() + (i + 1) * per));
    for (int64_t i = 0; i < 50; ++i) {
      Sample s = ds->get(i);
      std::vector<float> v(per);
      for (int64_t c = 0; c < 3; ++c)
        for (int64_t p = 0; p < 64; ++p) v[c * 64 + p] = static_cast<float>(s.image.hwc[p * 3 + c]) / 255.0f;
      expected.insert(v);
    }
    EXPECT_TRUE(seen == expected);
  }
}

TEST(Loader, ShardsAreDisjointAndCoverTheEpoch) {
  uint64_t seed = testing::fresh_seed();
  const int64_t n = 103;
  // Tag each sample by its index: a dataset whose pixel 0 and label encode the index.
  struct Indexed : Dataset {
    int64_t n;
    explicit Indexed(int64_t n) : n(n) {}
    int64_t size() const override { return n; }
    int64_t num_classes() const override { return n; }
    Sample get(int64_t i) const override {
      Sample s;
      s.label = i;
      s.image = Image{1, 1, 1, {static_cast<uint8_t>(i)}};
      return s;
    }
    std::string describe() const override { return "indexed"; }
  };
  auto ds = std::make_shared<Indexed>(n);
  for (int64_t w : {1, 2, 3, 4}) {
    std::vector<int64_t> all;
    for (int64_t r = 0; r < w; ++r) {
      LoaderOptions o;
      o.batch_size = 8;
      o.drop_last = false;
      o.seed = seed;
      o.num_shards = w;
      o.shard_rank = r;
      o.first_epoch = 3;
      Loader loader(ds, Pipeline(), o);
      EXPECT_EQ(loader.shard_size(), rows_for(r, w, n).count);
      while (auto b = loader.next()) {
        EXPECT_EQ(b->epoch, 3);
        for (int64_t v : b->labels.to_vector<int64_t>()) all.push_back(v);
      }
    }
    std::sort(all.begin(), all.end());
    ASSERT_EQ(static_cast<int64_t>(all.size()), n) << w << " shards";
    for (int64_t i = 0; i < n; ++i) EXPECT_EQ(all[i], i) << w << " shards";
  }
}

TEST(Loader, HybridSplitsPartitionEachGlobalBatch) {
  uint64_t seed = testing::fresh_seed();
  auto ds = synthetic(200, seed, 4);
  LoaderOptions base;
  base.batch_size = 64;
  base.seed = seed;
  base.num_workers = 1;
  Loader whole(ds, Pipeline::parse("flip"), base);
  std::vector<Batch> full = drain(whole, 1);
  ASSERT_EQ(full.size(), 3u);
  const int64_t g = 3;
  std::vector<std::vector<Batch>> parts;
  for (int64_t r = 0; r < g; ++r) {
    LoaderOptions o = base;
    o.split_rank = r;
    o.split_size = g;
    Loader part(ds, Pipeline::parse("flip"), o);
    parts.push_back(drain(part, 1));
  }
  for (size_t b = 0; b < full.size(); ++b) {
    std::vector<Tensor> imgs, labels;
    for (int64_t r = 0; r < g; ++r) {
      EXPECT_EQ(parts[r][b].images.size(0), rows_for(r, g, 64).count);
      imgs.push_back(parts[r][b].images);
      labels.push_back(parts[r][b].labels);
    }
    testing::expect_bitwise_equal(concat(imgs, 0), full[b].images, "split images");
    testing::expect_bitwise_equal(concat(labels, 0), full[b].labels, "split labels");
  }
}

// A dataset that throws a typed error for one sample.
struct Broken : Dataset {
  int64_t size() const override { return 40; }
  int64_t num_classes() const override { return 2; }
  Sample get(int64_t i) const override {
    if (i == 13) TD_THROW(IoError, "broken.bin: record 13 is corrupt");
    Sample s;
    s.label = i % 2;
    s.image = Image{2, 2, 1, {1, 2, 3, 4}};
    return s;
  }
  std::string describe() const override { return "broken"; }
};

TEST(Loader, WorkerErrorsSurfaceInNextWithTheirType) {
  for (int workers : {0, 3}) {
    LoaderOptions o;
    o.batch_size = 4;
    o.shuffle = false;
    o.num_workers = workers;
    Loader loader(std::make_shared<Broken>(), Pipeline(), o);
    int ok = 0;
    bool thrown = false;
    for (int i = 0; i < 10; ++i) {
      try {
        if (loader.next()) ++ok;
      } catch (const IoError& e) {
        thrown = true;
        EXPECT_NE(std::string(e.what()).find("record 13"), std::string::npos);
        EXPECT_EQ(i, 3);
      }
    }
    EXPECT_TRUE(thrown);
    EXPECT_EQ(ok, 9);
  }
}

// Synthetic samples that take 20 ms each after the first batch's, counting the calls started and in progress.
struct Slow : Dataset {
  explicit Slow(std::shared_ptr<Dataset> d) : inner(std::move(d)) {}
  int64_t size() const override { return inner->size(); }
  int64_t num_classes() const override { return inner->num_classes(); }
  Sample get(int64_t i) const override {
    ++started;
    ++active;
    if (i >= 16) std::this_thread::sleep_for(std::chrono::milliseconds(20));
    Sample s = inner->get(i);
    --active;
    return s;
  }
  std::string describe() const override { return "slow"; }
  std::shared_ptr<Dataset> inner;
  mutable std::atomic<int> started{0}, active{0};
};

TEST(Loader, StopsCleanlyWithBatchesInFlight) {
  auto slow = std::make_shared<Slow>(synthetic(1000, testing::fresh_seed()));
  for (int i = 0; i < 5; ++i) {
    slow->started = 0;
    {
      LoaderOptions o;
      o.batch_size = 16;
      o.shuffle = false;
      o.num_workers = 4;
      o.prefetch = 8;
      Loader loader(slow, Pipeline::parse("cifar-train"), o);
      auto b = loader.next();
      ASSERT_TRUE(b.has_value());
      EXPECT_EQ(b->images.size(0), 16);
      EXPECT_EQ(b->labels.to_vector<int64_t>(), [&] {
        std::vector<int64_t> want;
        for (int64_t k = 0; k < 16; ++k) want.push_back(slow->inner->get(k).label);
        return want;
      }());
      // Wait (at most 10 s) until a worker is inside a sample, so that the destructor meets one mid-batch.
      for (int ms = 0; slow->active.load() == 0 && ms < 10000; ++ms)
        std::this_thread::sleep_for(std::chrono::milliseconds(1));
      ASSERT_GT(slow->active.load(), 0) << "no worker was loading when the loader was destroyed";
    }  // the destructor stops and joins the workers while they are busy
    EXPECT_EQ(slow->active.load(), 0) << "a worker still runs after the loader was destroyed";
    const int started = slow->started.load();
    // It stopped instead of loading the rest of the epoch (62 batches): at most the first batch, 8 prefetched
    // and one per worker in progress were started.
    EXPECT_LE(started, 16 * (1 + 8 + 4));
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
    EXPECT_EQ(slow->started.load(), started) << "samples were requested after the loader was destroyed";
  }
}

TEST(Loader, SetEpochRestartsDeterministically) {
  uint64_t seed = testing::fresh_seed();
  auto ds = synthetic(60, seed);
  LoaderOptions o;
  o.batch_size = 20;
  o.seed = seed;
  o.num_workers = 2;
  Loader a(ds, Pipeline::parse("cifar-train"), o);
  a.next();
  a.set_epoch(5);
  auto x = a.next();
  o.first_epoch = 5;
  Loader b(ds, Pipeline::parse("cifar-train"), o);
  auto y = b.next();
  ASSERT_TRUE(x && y);
  EXPECT_EQ(x->epoch, 5);
  testing::expect_bitwise_equal(x->images, y->images, "epoch 5 batch 0");
  EXPECT_GT(a.images_per_second(), 0.0);
}

TEST(Loader, RejectsBadOptions) {
  auto ds = synthetic(10, 1);
  LoaderOptions o;
  o.batch_size = 11;  // drop_last leaves no batch
  EXPECT_THROW(Loader(ds, Pipeline(), o), ValueError);
  o.batch_size = 0;
  EXPECT_THROW(Loader(ds, Pipeline(), o), ValueError);
  o.batch_size = 2;
  o.shard_rank = 2;
  o.num_shards = 2;
  EXPECT_THROW(Loader(ds, Pipeline(), o), ValueError);
}

}  // namespace
}  // namespace data
}  // namespace tandem
