// Memory trackers, category guards and scopes.
#include "runtime/memory/memory.h"

#include <map>

#include "runtime/base/error.h"
#include "runtime/memory/stream.h"

namespace tandem {

const char* category_name(MemoryCategory c) {
  switch (c) {
    case MemoryCategory::Parameters: return "parameters";
    case MemoryCategory::Gradients: return "gradients";
    case MemoryCategory::OptimizerState: return "optimizer_state";
    case MemoryCategory::Activations: return "activations";
    case MemoryCategory::Workspace: return "workspace";
    case MemoryCategory::Communication: return "communication";
  }
  return "?";
}

void MemoryTracker::change(MemoryCategory c, int64_t delta, bool is_allocation) {
  std::lock_guard<std::mutex> lock(mu_);
  int i = static_cast<int>(c);
  counters_.current[i] += delta;
  counters_.total_current += delta;
  if (counters_.current[i] > counters_.peak[i]) counters_.peak[i] = counters_.current[i];
  if (counters_.total_current > counters_.total_peak) counters_.total_peak = counters_.total_current;
  if (is_allocation) ++counters_.allocations;
  if (recording_) samples_.push_back({host_time_s(), c, counters_.current[i], counters_.total_current});
}

void MemoryTracker::on_alloc(MemoryCategory c, int64_t bytes) { change(c, bytes, true); }
void MemoryTracker::on_free(MemoryCategory c, int64_t bytes) { change(c, -bytes, false); }
void MemoryTracker::on_move(MemoryCategory from, MemoryCategory to, int64_t bytes) {
  change(from, -bytes, false);
  change(to, bytes, false);
}

MemoryCounters MemoryTracker::counters() const {
  std::lock_guard<std::mutex> lock(mu_);
  return counters_;
}

void MemoryTracker::reset_peaks() {
  std::lock_guard<std::mutex> lock(mu_);
  counters_.peak = counters_.current;
  counters_.total_peak = counters_.total_current;
}

void MemoryTracker::start_recording() {
  std::lock_guard<std::mutex> lock(mu_);
  recording_ = true;
  samples_.clear();
}

std::vector<MemorySample> MemoryTracker::stop_recording() {
  std::lock_guard<std::mutex> lock(mu_);
  recording_ = false;
  return std::move(samples_);
}

std::vector<MemorySample> MemoryTracker::samples() const {
  std::lock_guard<std::mutex> lock(mu_);
  return samples_;
}

MemoryTracker& device_memory(Device device) {
  static std::mutex mu;
  static auto* trackers = new std::map<std::pair<int, int>, std::unique_ptr<MemoryTracker>>();
  std::lock_guard<std::mutex> lock(mu);
  auto key = std::make_pair(static_cast<int>(device.type), device.is_cpu() ? 0 : device.index);
  auto& slot = (*trackers)[key];
  if (!slot) slot.reset(new MemoryTracker(device.str()));
  return *slot;
}

namespace {
thread_local MemoryCategory tl_category = MemoryCategory::Activations;
thread_local std::vector<std::shared_ptr<MemoryTracker>>* tl_scopes = nullptr;
std::vector<std::shared_ptr<MemoryTracker>>& scopes() {
  if (tl_scopes == nullptr) tl_scopes = new std::vector<std::shared_ptr<MemoryTracker>>();
  return *tl_scopes;
}
}  // namespace

MemoryCategory current_memory_category() { return tl_category; }
MemoryCategoryGuard::MemoryCategoryGuard(MemoryCategory c) : previous_(tl_category) { tl_category = c; }
MemoryCategoryGuard::~MemoryCategoryGuard() { tl_category = previous_; }

MemoryScope::MemoryScope(std::shared_ptr<MemoryTracker> tracker) {
  TD_CHECK(tracker != nullptr, "MemoryScope needs a tracker");
  scopes().push_back(std::move(tracker));
}
MemoryScope::~MemoryScope() { scopes().pop_back(); }
const std::vector<std::shared_ptr<MemoryTracker>>& current_memory_scopes() { return scopes(); }
void set_memory_scopes(std::vector<std::shared_ptr<MemoryTracker>> s) { scopes() = std::move(s); }

}  // namespace tandem
