// The CPU's caching allocator: blocks big enough, aligned and disjoint; freed blocks come back for the same size
// class; the byte limit (1 MiB here, TANDEM_CPU_CACHE_MB in BUILD) holds, a full cache making room; memory
// accounting and the stream checker see allocations and frees as without a cache.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <vector>

#include "runtime/memory/host_cache.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/storage.h"
#include "runtime/memory/stream.h"
#include "runtime/memory/stream_check.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using testing::fresh_seed;

TEST(HostCache, BlocksAreAlignedBigEnoughAndDisjoint) {
  host_cache::trim();
  std::mt19937_64 rng(fresh_seed());
  struct Block {
    unsigned char* p;
    size_t nbytes, block;
  };
  std::vector<Block> live;
  for (int i = 0; i < 200; ++i) {
    // Sizes across the classes: 1 B to 256 KiB, log-uniform.
    size_t nbytes = static_cast<size_t>(std::exp2(std::uniform_real_distribution<double>(0, 18)(rng)));
    size_t block = 0;
    auto* p = static_cast<unsigned char*>(host_cache::allocate(nbytes, &block));
    EXPECT_EQ(reinterpret_cast<uintptr_t>(p) % 64, 0u) << nbytes;
    EXPECT_GE(block, nbytes);
    EXPECT_LE(block, nbytes + nbytes / 8 + 64) << "more than 12.5% (plus the 64-byte rounding) over " << nbytes;
    std::memset(p, i & 0xff, block);  // the whole block is ours
    live.push_back({p, nbytes, block});
    if (rng() % 3 == 0) {  // free one at random: later allocations may reuse it
      size_t k = rng() % live.size();
      host_cache::release(live[k].p, live[k].block);
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(k));
    }
  }
  // A block handed out twice, or one smaller than its size, would have been overwritten by another's pattern.
  for (const Block& b : live) {
    const unsigned char want = b.p[0];
    for (size_t j = 0; j < b.block; ++j) ASSERT_EQ(b.p[j], want) << "byte " << j << " of a block of " << b.block;
  }
  for (const Block& b : live) host_cache::release(b.p, b.block);
  host_cache::trim();
  EXPECT_EQ(host_cache::cached_bytes(), 0u);
}

TEST(HostCache, AFreedBlockServesTheNextAllocationOfItsSizeClass) {
  host_cache::trim();
  size_t block = 0;
  void* p = host_cache::allocate(100000, &block);
  host_cache::release(p, block);
  EXPECT_EQ(host_cache::cached_bytes(), block);
  size_t again = 0;
  EXPECT_EQ(host_cache::allocate(100000 - 100, &again), p) << "same size class, same block";
  EXPECT_EQ(again, block);
  size_t other = 0;
  void* q = host_cache::allocate(3 * block, &other);  // another class: not the cached block (now in use anyway)
  EXPECT_NE(q, p);
  host_cache::release(p, block);
  host_cache::release(q, other);
  host_cache::trim();
}

TEST(HostCache, HoldsNoMoreThanItsLimitAndMakesRoomWhenFull) {
  ASSERT_EQ(host_cache::limit_bytes(), size_t(1) << 20) << "BUILD sets TANDEM_CPU_CACHE_MB=1";
  host_cache::trim();
  std::vector<void*> blocks;
  size_t block = 0;
  for (int i = 0; i < 3; ++i) blocks.push_back(host_cache::allocate(512 << 10, &block));
  ASSERT_EQ(block, size_t(512) << 10);
  for (void* p : blocks) host_cache::release(p, block);
  // The third free found the cache full: the first two went, the third stays and serves the next allocation.
  EXPECT_EQ(host_cache::cached_bytes(), size_t(512) << 10);
  size_t again = 0;
  EXPECT_EQ(host_cache::allocate(512 << 10, &again), blocks[2]);
  host_cache::release(blocks[2], again);
  // A block larger than the whole limit is freed, and the cache kept.
  void* big = host_cache::allocate(2 << 20, &block);
  host_cache::release(big, block);
  EXPECT_EQ(host_cache::cached_bytes(), size_t(512) << 10);
  host_cache::trim();
}

TEST(HostCache, StoragesReuseBlocksAndAccountingSeesOnlyWhatIsInUse) {
  const Device cpu = Device::cpu();
  release_cached_memory(cpu);
  EXPECT_EQ(host_cache::cached_bytes(), 0u);
  const int64_t before = memory_counters(cpu).total_current;
  void* first = nullptr;
  {
    Tensor t = empty({20000}, TensorOptions(DType::F32));
    first = t.raw_data();
    EXPECT_EQ(memory_counters(cpu).total_current, before + 80000);
  }
  EXPECT_EQ(memory_counters(cpu).total_current, before) << "cached bytes are not charged";
  EXPECT_GT(host_cache::cached_bytes(), 0u);
  Tensor again = empty({20000}, TensorOptions(DType::F32));
  EXPECT_EQ(again.raw_data(), first);
  release_cached_memory(cpu);
  EXPECT_EQ(host_cache::cached_bytes(), 0u);
}

TEST(HostCache, TheStreamCheckerAcceptsABlockReusedOnAnotherStream) {
  testing::StreamCheckOn checker;
  Stream a = Stream::create(Device::cpu()), b = Stream::create(Device::cpu());
  Generator gen(fresh_seed());
  void* first = nullptr;
  {
    StreamGuard g(a);
    Tensor x = randn({4096}, gen);
    first = x.raw_data();
  }
  StreamGuard g(b);
  Tensor y = randn({4096}, gen);
  EXPECT_EQ(y.raw_data(), first) << "the block freed on stream a came back";
  Tensor z = mul(y, 2.0);  // a new storage, its accesses checked as any other
  testing::expect_bitwise_equal(z, add(y, y));
}

}  // namespace
}  // namespace tandem
