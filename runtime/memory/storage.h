// Storage: a reference-counted block of memory on one device, charged to a memory category.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>

#include "runtime/base/device.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/stream.h"

namespace tandem {

// Gives back to `device` the memory its pool keeps for reuse (the pool keeps everything freed, for speed; frees
// still queued stay). An allocation that finds the device full retries after it, and the library handles
// (cuBLAS, cuDNN, NCCL), which allocate outside the pool, are made after it. On the CPU: empties the host cache
// (runtime/memory/host_cache.h).
void release_cached_memory(Device device);

// CudaGraph::capture calls these around a capture on `stream`. Meanwhile a free made by another thread of memory
// ordered on `stream` (allocated on it, or used on it) waits, and runs at capture_ended: queued on the capturing
// stream it would become a node of the graph (freeing memory the graph does not own), and ordering the stream after
// another one is a dependency a capture refuses from outside it.
void capture_beginning(const Stream& stream);
void capture_ended(const Stream& stream);

class Storage {
 public:
  Storage() = default;
  // nbytes of memory on `device`, ordered on `stream` (CUDA: stream-ordered pool; CPU: 64-byte aligned, from the host
  // cache), charged to the thread's current category and memory scopes. `pinned` asks for page-locked host memory
  // (cudaHostAlloc) when a GPU is present; it is plain host memory otherwise.
  static Storage allocate(size_t nbytes, Device device, const Stream& stream, bool pinned = false);

  bool defined() const { return impl_ != nullptr; }
  void* data() const;
  size_t nbytes() const;
  Device device() const;
  bool pinned() const;
  MemoryCategory category() const;
  // Moves this memory to another category in every tracker it is charged to.
  void set_category(MemoryCategory c) const;
  // The memory is also used on `stream`: freeing it will wait for the work queued there so far (on the CPU,
  // where ops are synchronous, the free does not wait, but the stream checker holds it to this pledge).
  // For device memory, `stream` is a CUDA stream of any device (another device's: a peer copy's, a
  // collective's); the free then waits through an event made on that stream's device, whatever the freeing
  // thread's current device. A CPU stream orders nothing on a GPU: for device memory it is a DeviceError.
  void record_stream(const Stream& stream) const;
  // Version counter shared by every view of this storage; in-place ops bump it.
  uint64_t version() const;
  void bump_version() const;
  long use_count() const { return impl_.use_count(); }
  bool same(const Storage& o) const { return impl_ == o.impl_; }

 private:
  struct Impl;
  std::shared_ptr<Impl> impl_;
};

}  // namespace tandem
