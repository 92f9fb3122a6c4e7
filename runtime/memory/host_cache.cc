// The CPU's caching allocator: size-class free lists of host blocks under one lock, emptied when a free would
// take them past the byte limit.
#include "runtime/memory/host_cache.h"

#include <cstdlib>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/base/parse_number.h"

namespace tandem {
namespace host_cache {

namespace {
constexpr size_t kAlignment = 64;

// Blocks are rounded up to a size class: 64-byte steps up to 4 KiB, then 8 classes per power of two (at most
// 12.5% more than asked). A training step asks for the same sizes every iteration, so its blocks come back.
size_t size_class(size_t nbytes) {
  size_t rounded = (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  if (rounded <= 4096) return rounded;
  size_t top = size_t(1) << (63 - __builtin_clzll(rounded - 1));  // the largest power of two below rounded
  size_t step = top / 8;
  return (rounded + step - 1) / step * step;
}

size_t read_limit() {
  const char* v = std::getenv("TANDEM_CPU_CACHE_MB");
  if (v == nullptr || v[0] == '\0') return size_t(4096) << 20;
  int64_t mb = 0;
  TD_CHECK(parse_count(v, &mb) && mb <= (int64_t(1) << 40),
           "TANDEM_CPU_CACHE_MB must be a whole number of MiB (0 turns the CPU cache off), not '", v, "'");
  return static_cast<size_t>(mb) << 20;
}

struct Cache {
  std::mutex mu;
  std::map<size_t, std::vector<void*>> free_blocks;  // by block size
  size_t cached = 0;
};
Cache& cache() {
  static Cache* c = new Cache();  // never destroyed: storages may be freed during static destruction
  return *c;
}

void free_all(Cache& c) {  // c.mu held
  for (auto& kv : c.free_blocks)
    for (void* p : kv.second) std::free(p);
  c.free_blocks.clear();
  c.cached = 0;
}
}  // namespace

size_t limit_bytes() {
  static const size_t limit = read_limit();
  return limit;
}

void* allocate(size_t nbytes, size_t* block_bytes) {
  const size_t limit = limit_bytes();  // a bad TANDEM_CPU_CACHE_MB throws here, not in release()
  const size_t size = limit > 0 ? size_class(nbytes) : (nbytes + kAlignment - 1) / kAlignment * kAlignment;
  *block_bytes = size;
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    auto it = c.free_blocks.find(size);
    if (it != c.free_blocks.end() && !it->second.empty()) {
      void* p = it->second.back();
      it->second.pop_back();
      c.cached -= size;
      return p;
    }
  }
  void* p = std::aligned_alloc(kAlignment, size);
  if (p == nullptr) {
    trim();
    p = std::aligned_alloc(kAlignment, size);
  }
  TD_CHECK_T(BackendError, p != nullptr, "out of host memory allocating ", nbytes, " bytes");
  return p;
}

void release(void* data, size_t block_bytes) noexcept {
  Cache& c = cache();
  {
    std::lock_guard<std::mutex> lock(c.mu);
    // Full: a loop whose memory fits the limit never fills it, so the cached blocks are most likely of sizes no
    // longer asked for (another model, batch or phase); they go, and this one stays.
    if (block_bytes <= limit_bytes()) {
      if (c.cached + block_bytes > limit_bytes()) free_all(c);
      try {
        c.free_blocks[block_bytes].push_back(data);
        c.cached += block_bytes;
        return;
      } catch (...) {
        // No room for the list entry: free the block instead.
      }
    }
  }
  std::free(data);
}

void trim() noexcept {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  free_all(c);
}

size_t cached_bytes() {
  Cache& c = cache();
  std::lock_guard<std::mutex> lock(c.mu);
  return c.cached;
}

}  // namespace host_cache
}  // namespace tandem
