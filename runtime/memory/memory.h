// Memory accounting: allocation categories, per-device and per-scope trackers (current, peak, bytes over time).
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/non_copyable.h"

namespace tandem {

enum class MemoryCategory : uint8_t {
  Parameters,
  Gradients,
  OptimizerState,
  Activations,
  Workspace,
  Communication,
};
constexpr int kNumMemoryCategories = 6;
const char* category_name(MemoryCategory c);

struct MemoryCounters {
  std::array<int64_t, kNumMemoryCategories> current{};
  std::array<int64_t, kNumMemoryCategories> peak{};
  int64_t total_current = 0;
  int64_t total_peak = 0;
  int64_t allocations = 0;  // number of allocations made so far
  int64_t cur(MemoryCategory c) const { return current[static_cast<int>(c)]; }
  int64_t peak_of(MemoryCategory c) const { return peak[static_cast<int>(c)]; }
};

// One change of the tracked bytes, stamped with host_time_s().
struct MemorySample {
  double time_s;
  MemoryCategory category;
  int64_t category_bytes;  // bytes of `category` after the change
  int64_t total_bytes;     // bytes of all categories after the change
};

// Counts live bytes per category. Thread-safe.
class MemoryTracker {
 public:
  explicit MemoryTracker(std::string name = "") : name_(std::move(name)) {}
  void on_alloc(MemoryCategory c, int64_t bytes);
  void on_free(MemoryCategory c, int64_t bytes);
  void on_move(MemoryCategory from, MemoryCategory to, int64_t bytes);  // re-categorized live memory
  MemoryCounters counters() const;
  void reset_peaks();  // peaks := current
  // Bytes-over-time record: every change from now on is appended as a MemorySample.
  void start_recording();
  std::vector<MemorySample> stop_recording();
  std::vector<MemorySample> samples() const;
  const std::string& name() const { return name_; }

 private:
  void change(MemoryCategory c, int64_t delta, bool is_allocation);
  std::string name_;
  mutable std::mutex mu_;
  MemoryCounters counters_;
  bool recording_ = false;
  std::vector<MemorySample> samples_;
};

// The tracker of all memory allocated on `device`.
MemoryTracker& device_memory(Device device);
// Shortcut: the counters of device_memory(device).
inline MemoryCounters memory_counters(Device device) { return device_memory(device).counters(); }

// The category new allocations on this thread are charged to (default: activations).
MemoryCategory current_memory_category();
class MemoryCategoryGuard : NonCopyable {
 public:
  explicit MemoryCategoryGuard(MemoryCategory c);
  ~MemoryCategoryGuard();

 private:
  MemoryCategory previous_;
};

// While in scope, allocations made by this thread are also charged to `tracker` (e.g. one per worker),
// until the memory is freed, whichever thread frees it. Scopes nest: every enclosing tracker is charged.
class MemoryScope : NonCopyable {
 public:
  explicit MemoryScope(std::shared_ptr<MemoryTracker> tracker);
  ~MemoryScope();
};
// The trackers of the active scopes on this thread, outermost first.
const std::vector<std::shared_ptr<MemoryTracker>>& current_memory_scopes();
// Replaces them all (ThreadContext carries a thread's scopes to another: runtime/tensor/thread_context.h).
void set_memory_scopes(std::vector<std::shared_ptr<MemoryTracker>> scopes);

}  // namespace tandem
