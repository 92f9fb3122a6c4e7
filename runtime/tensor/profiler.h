// The kernel profiler: while a profile runs, every kernel call through the registries' wrappers is timed and
// attributed to the innermost named scope (ProfileScope) open on its thread, so that a step's time splits into
// ops and kernels (profile_table.h prints it; runtime/formats/chrome_trace.h writes it for chrome://tracing).
// Kernel times come from a device timer where one is registered and works (CUPTI on a real GPU, registered by
// the CUDA backend), else from host timers around each call, with the call's stream synchronized before and
// after so that the time is the kernel's own.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/non_copyable.h"
#include "runtime/tensor/kernel_observer.h"

namespace tandem {
namespace profiler {

namespace detail {
extern std::atomic<bool> g_active;
}

// True while a profile runs. One relaxed load.
inline bool active() { return detail::g_active.load(std::memory_order_relaxed); }

// One kernel: its name (the backend method under host timers, the CUDA kernel under a device timer), the op
// (innermost scope) that launched it, its time on the steady clock and the bytes its operands span (0: unknown).
struct KernelRecord {
  std::string name;
  std::string op;
  int64_t start_ns = 0, end_ns = 0;
  uint64_t bytes = 0;
  uint64_t stream = 0;  // Stream::id() under host timers, the device's stream number under a device timer
};

// One closed scope: its name, how many scopes enclosed it, the thread (numbered from 0 in order of first use).
struct ScopeRecord {
  std::string name;
  int depth = 0;
  int thread = 0;
  int64_t start_ns = 0, end_ns = 0;
};

struct Profile {
  std::string timer;  // what timed the kernels: "host timers" or the device timer's name ("CUPTI")
  int64_t start_ns = 0, end_ns = 0;
  std::vector<KernelRecord> kernels;  // in order of their start
  std::vector<ScopeRecord> scopes;    // in order of their start
  double ms() const { return static_cast<double>(end_ns - start_ns) * 1e-6; }
};

// The name under which kernels launched outside every scope are listed.
extern const char* const kNoOp;

// What times the kernels: the device's own timer where it has one that starts (else host timers), or host timers.
enum class Timer { Best, Host };

// Starts a profile: synchronizes the current stream of each of `devices` (the work before is not timed) and
// times the kernels every thread calls from now on. Throws ValueError when one already runs.
void start(const std::vector<Device>& devices, Timer timer = Timer::Best);
// Synchronizes the current streams of the devices given to start, ends the profile and returns it. Throws
// ValueError when none runs.
Profile stop();

// A device's own kernel timer (CUPTI's activity API on a real GPU). The profiler marks each backend call on the
// calling thread (begin_call/end_call) so that the timer can tie the kernels it launches to it.
struct DeviceKernel {
  std::string name;
  uint64_t call = 0;                 // the begin_call that launched it; 0: none
  int64_t start_ns = 0, end_ns = 0;  // on the steady clock
  uint64_t stream = 0;
};
class DeviceTimer {
 public:
  virtual ~DeviceTimer() = default;
  virtual const char* name() const = 0;
  virtual void begin_call(uint64_t call) = 0;
  virtual void end_call() = 0;
  // Stops recording and returns the kernels that ran since it was made (the streams were synchronized).
  virtual std::vector<DeviceKernel> finish() = 0;
};
// Makes a started timer for profiles of `device`, or returns null: with `why_not` set when the device should have
// had one (start() says why on one stderr line), left empty when host timers are its timers (a simulated GPU).
using DeviceTimerFactory = std::unique_ptr<DeviceTimer> (*)(Device device, std::string* why_not);
// The CUDA backend registers CUPTI's at load; null unregisters. Returns the factory it replaces (the cost model
// puts its own in place for a recording and back after).
DeviceTimerFactory register_device_timer(DeviceType type, DeviceTimerFactory factory);

// The observer the kernel registries' wrappers show each call to while a profile runs.
KernelObserver& observer();

}  // namespace profiler

// Opens the scope named `name` followed by `suffix` on this thread while in scope: kernels called inside it
// belong to it (to the innermost of nested scopes). Costs one relaxed load when no profile runs.
class ProfileScope : NonCopyable {
 public:
  explicit ProfileScope(const char* name, const char* suffix = "") {
    if (profiler::active()) open(name, suffix);
  }
  ~ProfileScope() {
    if (opened_) close();
  }

 private:
  void open(const char* name, const char* suffix);
  void close();
  bool opened_ = false;
  uint64_t session_ = 0;
  int64_t start_ns_ = 0;
};

}  // namespace tandem
