// The profiler's session: the scopes each thread opens, the kernel calls the registries' wrappers show it, and
// the timer (host timers or a device's own) that times them.
#include "runtime/tensor/profiler.h"

#include <algorithm>
#include <array>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/memory/stream.h"

namespace tandem {
namespace profiler {

namespace detail {
std::atomic<bool> g_active{false};
}

const char* const kNoOp = "(no op)";

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

// One kernel call as the wrapper showed it; timed by host timers unless a device timer runs.
struct Call {
  std::string method, op;
  int64_t start_ns = 0, end_ns = 0;
  uint64_t bytes = 0;
  uint64_t stream = 0;
};

struct Session {
  std::mutex mu;
  uint64_t id = 0;  // 0: none has run; each start() takes the next
  std::vector<Device> devices;
  std::unique_ptr<DeviceTimer> device_timer;
  int64_t start_ns = 0;
  std::vector<Call> calls;  // calls[i] is call i + 1 to the device timer
  std::vector<ScopeRecord> scopes;
};
Session& session() {
  static auto* s = new Session();  // never destroyed: kernels may run during exit
  return *s;
}

std::array<DeviceTimerFactory, 2>& device_timers() {
  static std::array<DeviceTimerFactory, 2> factories{};
  return factories;
}

// This thread's open scopes, innermost last, and the calls it has in flight (session, call number).
thread_local std::vector<std::string> t_scopes;
thread_local std::vector<std::pair<uint64_t, uint64_t>> t_calls;

int thread_number() {
  static std::atomic<int> next{0};
  thread_local int number = next.fetch_add(1);
  return number;
}

void synchronize_devices(const std::vector<Device>& devices) {
  for (const Device& d : devices) current_stream(d).synchronize();
}

// The device timer for a profile of `devices`: the first one a device's backend registered that starts; null for
// host timers, after one line on stderr when the factory said why it could not start.
std::unique_ptr<DeviceTimer> make_device_timer(const std::vector<Device>& devices) {
  for (const Device& d : devices) {
    DeviceTimerFactory factory = device_timers()[static_cast<int>(d.type)];
    if (factory == nullptr) continue;
    std::string why_not;
    std::unique_ptr<DeviceTimer> timer = factory(d, &why_not);
    if (timer) return timer;
    if (!why_not.empty())
      std::fprintf(stderr, "tandem: profiler: %s; timing kernels with host timers\n", why_not.c_str());
    return nullptr;
  }
  return nullptr;
}

class ProfilerObserver final : public KernelObserver {
 public:
  void before(const char* method, const Stream& s, const std::vector<Operand>& operands) override {
    Call call{method, t_scopes.empty() ? kNoOp : t_scopes.back(), 0, 0, 0, s.id()};
    for (const Operand& o : operands)
      if (o.ptr != nullptr) call.bytes += o.bytes();
    Session& ss = session();
    std::lock_guard<std::mutex> lock(ss.mu);
    if (!active()) return;
    ss.calls.push_back(call);
    t_calls.emplace_back(ss.id, ss.calls.size());
    if (ss.device_timer) {
      ss.device_timer->begin_call(ss.calls.size());
    } else {
      if (s.device().is_cuda()) s.synchronize();  // the work queued before is not this kernel's
      ss.calls.back().start_ns = now_ns();
    }
  }

  void after(const char*, const Stream& s, const std::vector<Operand>&) override {
    if (t_calls.empty()) return;
    const std::pair<uint64_t, uint64_t> call = t_calls.back();
    t_calls.pop_back();
    Session& ss = session();
    std::lock_guard<std::mutex> lock(ss.mu);
    if (!active() || call.first != ss.id) return;
    if (ss.device_timer) {
      ss.device_timer->end_call();
    } else {
      if (s.device().is_cuda()) s.synchronize();
      ss.calls[call.second - 1].end_ns = now_ns();
    }
  }
};

std::vector<KernelRecord> host_timed_kernels(const std::vector<Call>& calls) {
  std::vector<KernelRecord> kernels;
  for (const Call& c : calls)
    if (c.end_ns != 0) kernels.push_back({c.method, c.op, c.start_ns, c.end_ns, c.bytes, c.stream});
  return kernels;
}

// The device timer's kernels, each given the op of the call that launched it; a call's bytes go to its first.
std::vector<KernelRecord> device_timed_kernels(std::vector<DeviceKernel> device, std::vector<Call>& calls) {
  std::stable_sort(device.begin(), device.end(),
                   [](const DeviceKernel& a, const DeviceKernel& b) { return a.start_ns < b.start_ns; });
  std::vector<KernelRecord> kernels;
  for (const DeviceKernel& k : device) {
    KernelRecord r{k.name, kNoOp, k.start_ns, k.end_ns, 0, k.stream};
    if (k.call >= 1 && k.call <= calls.size()) {
      Call& c = calls[k.call - 1];
      r.op = c.op;
      r.bytes = c.bytes;
      c.bytes = 0;
    }
    kernels.push_back(r);
  }
  return kernels;
}

}  // namespace

void start(const std::vector<Device>& devices, Timer which) {
  Session& ss = session();
  std::unique_lock<std::mutex> lock(ss.mu);
  TD_CHECK_T(ValueError, !active(), "a profile is already running (profiler::start twice without stop)");
  std::unique_ptr<DeviceTimer> timer = which == Timer::Best ? make_device_timer(devices) : nullptr;
  lock.unlock();
  synchronize_devices(devices);
  lock.lock();
  ss.devices = devices;
  ss.device_timer = std::move(timer);
  ss.calls.clear();
  ss.scopes.clear();
  ++ss.id;
  ss.start_ns = now_ns();
  detail::g_active.store(true);
}

Profile stop() {
  Session& ss = session();
  TD_CHECK_T(ValueError, active(), "no profile is running (profiler::stop without start)");
  synchronize_devices(ss.devices);
  std::lock_guard<std::mutex> lock(ss.mu);
  Profile p;
  p.end_ns = now_ns();
  detail::g_active.store(false);
  p.start_ns = ss.start_ns;
  p.timer = ss.device_timer ? ss.device_timer->name() : "host timers";
  p.kernels =
      ss.device_timer ? device_timed_kernels(ss.device_timer->finish(), ss.calls) : host_timed_kernels(ss.calls);
  ss.device_timer.reset();
  p.scopes = std::move(ss.scopes);
  std::stable_sort(p.scopes.begin(), p.scopes.end(),
                   [](const ScopeRecord& a, const ScopeRecord& b) { return a.start_ns < b.start_ns; });
  return p;
}

DeviceTimerFactory register_device_timer(DeviceType type, DeviceTimerFactory factory) {
  return std::exchange(device_timers()[static_cast<int>(type)], factory);
}

KernelObserver& observer() {
  static auto* o = new ProfilerObserver();  // never destroyed: kernels may run during exit
  return *o;
}

}  // namespace profiler

void ProfileScope::open(const char* name, const char* suffix) {
  profiler::Session& ss = profiler::session();
  {
    std::lock_guard<std::mutex> lock(ss.mu);
    if (!profiler::active()) return;
    session_ = ss.id;
  }
  profiler::t_scopes.push_back(std::string(name) + suffix);
  opened_ = true;
  start_ns_ = profiler::now_ns();
}

void ProfileScope::close() {
  const int64_t end_ns = profiler::now_ns();
  profiler::ScopeRecord r{std::move(profiler::t_scopes.back()), static_cast<int>(profiler::t_scopes.size()) - 1,
                          profiler::thread_number(), start_ns_, end_ns};
  profiler::t_scopes.pop_back();
  profiler::Session& ss = profiler::session();
  std::lock_guard<std::mutex> lock(ss.mu);
  if (profiler::active() && ss.id == session_) ss.scopes.push_back(std::move(r));
}

}  // namespace tandem
