// The stream checker (TANDEM_STREAM_CHECK=1): proves that every access of a storage by a stream, and every
// free, is ordered after the conflicting accesses of other streams by events or synchronization.
//
// It checks declared ordering, not real concurrency, so it works alike on the CPU backend (where streams are
// tags), a simulated GPU and a real one. As PyTorch's CUDA stream sanitizer: each stream keeps a vector clock
// (stream -> last access number known to be ordered before its next work); each access takes its stream's
// next number; each storage keeps its last writes and the reads since. Event::record snapshots the stream's
// clock, Stream::wait merges a snapshot in, and Stream/Event::synchronize merge into a host clock that every
// stream inherits when it next issues work. An access conflicts with an earlier one of another stream (write
// after write, read after write, write after read) unless the earlier one is covered by the current stream's
// clock; a free, on the storage's allocation stream after it waited for the streams given to record_stream,
// conflicts with every access it does not cover. Violations throw StreamOrderError naming both accesses.
//
// The default CPU stream (threads that set none: the main thread, data-loader threads) is the host itself: its
// work is complete when the op returns, so every stream's later work is ordered after it. Storage allocation
// counts as a write on the allocation stream (the stream-ordered allocator hands the memory to that stream).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/non_copyable.h"

namespace tandem {

class Stream;
enum class MemoryCategory : uint8_t;

namespace stream_check {

namespace detail {
extern std::atomic<bool> g_enabled;
}

// True while the checker runs: TANDEM_STREAM_CHECK=1 at start, or set_enabled(true). One relaxed load.
inline bool enabled() { return detail::g_enabled.load(std::memory_order_relaxed); }
// Turns the checker on or off (for tests). Either way it forgets what it recorded: storages allocated
// before are not checked, and violations not raised yet are dropped.
void set_enabled(bool on);

// One operand of an op: `bytes` from `ptr`, or all of the storage that holds ptr. Pointers outside every
// live storage (host arrays, memory Tandem did not allocate) and null pointers are ignored.
constexpr size_t kWholeStorage = SIZE_MAX;
struct Access {
  const void* ptr = nullptr;
  bool write = false;
  size_t bytes = kWholeStorage;
};
inline Access reads(const void* p, size_t bytes = kWholeStorage) { return Access{p, false, bytes}; }
inline Access writes(const void* p, size_t bytes = kWholeStorage) { return Access{p, true, bytes}; }
// (The bytes a tensor's view spans: runtime/tensor/tensor_access.h.)

// Records that `op`, queued on `stream`, accesses `accesses`. Throws StreamOrderError when one conflicts with
// an access of another stream that nothing orders before it, or when a free on this thread was unordered.
void on_op(const char* op, const Stream& stream, const Access* accesses, size_t n);
inline void on_op(const char* op, const Stream& stream, std::initializer_list<Access> accesses) {
  on_op(op, stream, accesses.begin(), accesses.size());
}

// Storage lifetime (runtime/memory/storage.cc). on_allocate returns the allocation id (0 when not checked); it first
// raises a violation left by an earlier free on this thread, the allocation that may reuse its memory.
uint64_t on_allocate(const void* data, size_t nbytes, Device device, MemoryCategory category, const Stream& stream);
void on_set_category(uint64_t id, MemoryCategory category);
// The storage is freed on its allocation stream after that stream waited for `used_on` (record_stream). Called
// from a destructor: a violation is kept and raised by this thread's next checked call, or the next
// synchronize of any thread.
void on_free(uint64_t id, const Stream& stream, const std::vector<Stream>& used_on) noexcept;

// Events and synchronization (runtime/memory/stream.cc).
struct Clock;
std::shared_ptr<const Clock> on_record(const Stream& stream);
void on_wait(const Stream& stream, const Clock& recorded);
void on_synchronize(const Stream& stream);
void on_synchronize(const Clock& recorded);

// Names a stream in messages, e.g. "cpu#1 comm" (kept while the checker is off too).
void name_stream(const Stream& stream, const std::string& name);

// While in scope, messages say that this thread's accesses were made in `what` (e.g. a schedule instruction).
// current_context() is the innermost one's (null outside any), set_current_context replaces it (ThreadContext
// carries it to another thread: runtime/tensor/thread_context.h).
std::shared_ptr<const std::string> current_context();
void set_current_context(std::shared_ptr<const std::string> what);
class Context : NonCopyable {
 public:
  explicit Context(std::string what);
  ~Context();

 private:
  std::shared_ptr<const std::string> previous_;
};

}  // namespace stream_check
}  // namespace tandem
