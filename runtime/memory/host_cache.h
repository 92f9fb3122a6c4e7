// The CPU's caching allocator: freed 64-byte-aligned host blocks kept by size class for later allocations.
#pragma once

#include <cstddef>

namespace tandem {
namespace host_cache {

// A block of at least nbytes (> 0), 64-byte aligned, reused from the cache when one of its size class is there;
// *block_bytes gets the block's size, which release() needs. Throws BackendError when the host is out of memory
// (after giving back the cache and trying again).
void* allocate(size_t nbytes, size_t* block_bytes);
// Keeps the block for reuse; when that would take the cache past its limit, the blocks cached so far are freed
// first (they are of sizes no longer asked for), and a block larger than the limit is freed itself.
void release(void* data, size_t block_bytes) noexcept;
// Frees every cached block.
void trim() noexcept;
// Bytes held in the cache (free for reuse, not in use).
size_t cached_bytes();
// The most the cache holds: TANDEM_CPU_CACHE_MB (default 4096; 0 turns caching off).
size_t limit_bytes();

}  // namespace host_cache
}  // namespace tandem
