// Simulated streams and events: each stream runs its work in order on its own host thread, so the host
// returns before the work is done, exactly as with a GPU.
#include <cuda_runtime_api.h>

#include <chrono>
#include <cstdio>
#include <map>
#include <sstream>

#include "tools/cudasim/capture.h"
#include "tools/cudasim/sim.h"
#include "tools/cudasim/state.h"

namespace cudasim {

namespace {

// One lock and condition for every cross-stream wait: tasks waiting for events, peers or other streams.
std::mutex& wait_mu() {
  static auto* m = new std::mutex();
  return *m;
}
std::condition_variable& wait_cv() {
  static auto* c = new std::condition_variable();
  return *c;
}

// Live handles (the simulator checks every handle it is given; a destroyed one is an invalid handle).
std::mutex& registry_mu = *new std::mutex();
std::map<const CUstream_st*, std::shared_ptr<CUstream_st>>& streams() {
  static auto* m = new std::map<const CUstream_st*, std::shared_ptr<CUstream_st>>();
  return *m;
}
std::map<const CUevent_st*, std::shared_ptr<CUevent_st>>& events() {
  static auto* m = new std::map<const CUevent_st*, std::shared_ptr<CUevent_st>>();
  return *m;
}

std::atomic<uint64_t> next_stream_id{1};

// Streams whose last reference went: a reaper thread joins their threads once their queued work has run,
// so that destroying a stream never blocks the host (cudaStreamDestroy returns at once on a GPU too).
void retire(CUstream_st* s) {
  // Never destroyed: the reaper waits on them until the process ends.
  static std::mutex& mu = *new std::mutex();
  static std::condition_variable& cv = *new std::condition_variable();
  static std::deque<CUstream_st*>* dying = new std::deque<CUstream_st*>();
  static std::thread* reaper = new std::thread([] {
    for (;;) {
      CUstream_st* p;
      {
        std::unique_lock<std::mutex> lock(mu);
        cv.wait(lock, [] { return !dying->empty(); });
        p = dying->front();
        dying->pop_front();
      }
      if (p->thread.joinable()) p->thread.join();
      delete p;
    }
  });
  (void)reaper;
  {
    std::lock_guard<std::mutex> lock(mu);
    dying->push_back(s);
  }
  cv.notify_one();
}

std::string stream_name(const CUstream_st& s) {
  return "stream " + std::to_string(s.id) + (s.legacy ? " (legacy default)" : "") +
         " of cuda:" + std::to_string(s.device);
}

void run_stream(CUstream_st* s) {
  set_current_device(s->device);
  for (;;) {
    CUstream_st::Task task;
    {
      std::unique_lock<std::mutex> lock(s->mu);
      s->cv.wait(lock, [&] { return !s->queue.empty() || s->stopping; });
      if (s->queue.empty()) return;
      task = std::move(s->queue.front());
      s->queue.pop_front();
      s->running = task.what;
    }
    if (sticky_error(s->device) == cudaSuccess) {
      try {
        task.fn();
      } catch (const Fault& f) {
        set_sticky(s->device, Fault{f.code, f.message + " (in " + stream_name(*s) + ")"});
      } catch (const std::exception& e) {
        set_sticky(s->device, Fault{cudaErrorLaunchFailure, task.what + ": " + e.what()});
      }
    }
    // What the work captured (a staged copy of pageable memory, say) is released before the work counts as
    // done: a host thread that synchronizes may then drop the last reference itself.
    task.fn = nullptr;
    {
      std::lock_guard<std::mutex> lock(s->mu);
      s->completed++;
      s->running.clear();
    }
    if (task.then) task.then();
    notify_all();
  }
}

// Whether everything queued on `s` up to `target` has run.
bool reached(CUstream_st& s, uint64_t target) {
  std::lock_guard<std::mutex> lock(s.mu);
  return s.completed >= target;
}

uint64_t tail(CUstream_st& s) {
  std::lock_guard<std::mutex> lock(s.mu);
  return s.enqueued;
}

void push(CUstream_st& s, std::string what, std::function<void()> fn, std::function<void()> then = nullptr) {
  {
    std::lock_guard<std::mutex> lock(s.mu);
    s.queue.push_back(CUstream_st::Task{std::move(what), std::move(fn), std::move(then)});
    s.enqueued++;
  }
  s.cv.notify_one();
}

std::shared_ptr<CUstream_st> legacy_stream(int device) {
  DeviceState& d = device_state(device);
  {
    std::lock_guard<std::mutex> lock(d.mu);
    if (d.legacy) return d.legacy;
  }
  auto s = create_stream(device, 0, 0, d.all_sms);
  std::lock_guard<std::mutex> lock(d.mu);
  s->legacy = true;
  if (!d.legacy) d.legacy = s;
  return d.legacy;
}

std::shared_ptr<CUevent_st> event_ref(const CUevent_st* e) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = events().find(e);
  return it == events().end() ? nullptr : it->second;
}

}  // namespace

double now_ms() {
  static const auto start = std::chrono::steady_clock::now();
  return std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
}

void notify_all() {
  std::lock_guard<std::mutex> lock(wait_mu());
  wait_cv().notify_all();
}

void wait_until(const std::function<bool()>& ready, const std::string& what) {
  std::unique_lock<std::mutex> lock(wait_mu());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(config().watchdog_s);
  while (!ready()) {
    if (wait_cv().wait_until(lock, deadline) == std::cv_status::timeout && !ready()) {
      std::ostringstream os;
      os << what << " waited more than " << config().watchdog_s
         << " s (TANDEM_CUDASIM_WATCHDOG_S): a deadlock, or work that is never queued";
      fault(cudaErrorLaunchTimeout, os.str());
    }
  }
}

void host_wait(const std::function<bool()>& ready) {
  std::unique_lock<std::mutex> lock(wait_mu());
  while (!ready()) wait_cv().wait_for(lock, std::chrono::milliseconds(200));
}

std::shared_ptr<CUstream_st> create_stream(int device, unsigned flags, int priority, std::vector<int> sms) {
  auto s = std::shared_ptr<CUstream_st>(new CUstream_st(), [](CUstream_st* p) {
    {
      std::lock_guard<std::mutex> lock(p->mu);
      p->stopping = true;
    }
    p->cv.notify_all();
    retire(p);
  });
  s->id = next_stream_id++;
  s->device = device;
  s->flags = flags;
  s->priority = priority;
  s->sms = std::move(sms);
  s->thread = std::thread(run_stream, s.get());
  {
    std::lock_guard<std::mutex> lock(registry_mu);
    streams()[s.get()] = s;
  }
  DeviceState& d = device_state(device);
  std::lock_guard<std::mutex> lock(d.mu);
  d.streams.push_back(s);
  return s;
}

std::shared_ptr<CUstream_st> stream_ref(const CUstream_st* s) {
  std::lock_guard<std::mutex> lock(registry_mu);
  auto it = streams().find(s);
  return it == streams().end() ? nullptr : it->second;
}

StreamImpl* resolve_stream(cudaStream_t s, cudaError_t* err) {
  *err = cudaSuccess;
  if (s == nullptr || s == cudaStreamLegacy) {
    const int device = current_device();
    if ((*err = check_device(device)) != cudaSuccess) return nullptr;
    if ((*err = legacy_stream_error(device, "work")) != cudaSuccess) return nullptr;
    return legacy_stream(device).get();
  }
  if (s == cudaStreamPerThread) {
    *err = cudaErrorNotSupported;
    set_error(*err, "the per-thread default stream is not simulated");
    return nullptr;
  }
  auto ref = stream_ref(s);
  if (!ref) {
    *err = cudaErrorInvalidResourceHandle;
    set_error(*err, "a stream handle that is not a live stream (destroyed, or never created)");
    return nullptr;
  }
  if ((*err = sticky_error(ref->device)) != cudaSuccess) return nullptr;
  if ((*err = capture_state_error(ref.get())) != cudaSuccess) return nullptr;
  return ref.get();
}

int stream_device(const StreamImpl* s) { return s->device; }
const std::vector<int>& stream_sms(const StreamImpl* s) { return s->sms; }

void enqueue(StreamImpl* s, const std::string& what, std::function<void()> task) {
  enqueue_marked(s, what, std::move(task), nullptr);
}

void enqueue_marked(StreamImpl* s, const std::string& what, std::function<void()> task, std::function<void()> then) {
  if (capture_work(s, what, task, then)) return;  // recorded in a graph, not run
  // Legacy default stream semantics: it waits for the device's blocking streams, and they wait for it.
  if (s->legacy || (s->flags & cudaStreamNonBlocking) == 0) {
    std::vector<std::pair<std::shared_ptr<CUstream_st>, uint64_t>> before;
    DeviceState& d = device_state(s->device);
    std::vector<std::shared_ptr<CUstream_st>> others;
    {
      std::lock_guard<std::mutex> lock(d.mu);
      others = d.streams;
    }
    for (auto& o : others) {
      if (o.get() == s || (o->flags & cudaStreamNonBlocking) != 0) continue;
      if (!s->legacy && !o->legacy) continue;
      uint64_t t = tail(*o);
      if (t > 0) before.emplace_back(o, t);
    }
    if (!before.empty()) {
      push(*s, "implicit synchronization with the legacy default stream", [before] {
        for (auto& [o, t] : before) {
          CUstream_st* other = o.get();
          uint64_t target = t;
          wait_until([other, target] { return reached(*other, target); },
                     "the legacy default stream's implicit synchronization");
        }
      });
    }
  }
  push(*s, what, std::move(task), std::move(then));
}

cudaError_t synchronize(StreamImpl* s) {
  if (cudaError_t e = forbid_while_capturing(s, "a synchronization")) return e;
  const uint64_t target = tail(*s);
  host_wait([s, target] { return reached(*s, target); });
  release_pool_memory(s->device);
  return sticky_error(s->device);
}

void synchronize_device(int device) {
  DeviceState& d = device_state(device);
  std::vector<std::shared_ptr<CUstream_st>> all;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    all = d.streams;
  }
  for (auto& s : all) {
    const uint64_t target = tail(*s);
    host_wait([&s, target] { return reached(*s, target); });
  }
  release_pool_memory(device);
}

bool wait_device_idle(int device, const std::string& who) {
  DeviceState& d = device_state(device);
  std::vector<std::pair<std::shared_ptr<CUstream_st>, uint64_t>> targets;
  {
    std::lock_guard<std::mutex> lock(d.mu);
    for (auto& s : d.streams) targets.emplace_back(s, 0);
  }
  for (auto& [s, t] : targets) t = tail(*s);
  auto idle = [&] {
    for (auto& [s, t] : targets)
      if (!reached(*s, t)) return false;
    return true;
  };
  std::unique_lock<std::mutex> lock(wait_mu());
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(config().watchdog_s);
  while (!idle()) {
    if (sticky_error(device) != cudaSuccess) return false;  // a faulted device skips its queued work
    if (wait_cv().wait_until(lock, deadline) != std::cv_status::timeout || idle()) continue;
    std::ostringstream os;
    os << who << " waits for every stream of cuda:" << device << " to become idle, as the driver does to load a "
       << "module, and waited more than " << config().watchdog_s << " s (TANDEM_CUDASIM_WATCHDOG_S) for";
    const char* sep = " ";
    for (auto& [s, t] : targets) {
      if (reached(*s, t)) continue;
      std::lock_guard<std::mutex> slock(s->mu);
      os << sep << stream_name(*s) << " (" << (s->running.empty() ? "waiting" : "running " + s->running) << ", "
         << t - s->completed << " task(s) left)";
      sep = ", ";
    }
    os << ": on a GPU this hangs when what a stream waits for comes after this call (make handles and load "
          "kernels before any stream can wait for this thread)";
    lock.unlock();
    set_sticky(device, Fault{cudaErrorLaunchTimeout, os.str()});
    return false;
  }
  return true;
}

}  // namespace cudasim

using cudasim::set_error;

namespace {

cudaError_t create(cudaStream_t* out, unsigned flags, int priority) {
  if (out == nullptr) return set_error(cudaErrorInvalidValue);
  if (flags != cudaStreamDefault && flags != cudaStreamNonBlocking)
    return set_error(cudaErrorInvalidValue, "stream flags must be cudaStreamDefault or cudaStreamNonBlocking");
  const int device = cudasim::current_device();
  if (cudaError_t e = cudasim::check_device(device)) return set_error(e);
  *out = cudasim::create_stream(device, flags, priority, cudasim::device_state(device).all_sms).get();
  return cudaSuccess;
}

}  // namespace

extern "C" {

cudaError_t cudaStreamCreate(cudaStream_t* stream) { return create(stream, cudaStreamDefault, 0); }
cudaError_t cudaStreamCreateWithFlags(cudaStream_t* stream, unsigned int flags) { return create(stream, flags, 0); }
cudaError_t cudaStreamCreateWithPriority(cudaStream_t* stream, unsigned int flags, int priority) {
  return create(stream, flags, priority);
}

cudaError_t cudaStreamDestroy(cudaStream_t stream) {
  if (stream == nullptr || stream == cudaStreamLegacy || stream == cudaStreamPerThread)
    return set_error(cudaErrorInvalidResourceHandle, "cudaStreamDestroy of a default stream");
  std::shared_ptr<CUstream_st> s;
  {
    std::lock_guard<std::mutex> lock(cudasim::registry_mu);
    auto it = cudasim::streams().find(stream);
    if (it == cudasim::streams().end())
      return set_error(cudaErrorInvalidResourceHandle, "cudaStreamDestroy of a stream that is not live");
    s = it->second;
    cudasim::streams().erase(it);
  }
  cudasim::DeviceState& d = cudasim::device_state(s->device);
  {
    std::lock_guard<std::mutex> lock(d.mu);
    for (auto it = d.streams.begin(); it != d.streams.end(); ++it) {
      if (it->get() == s.get()) {
        d.streams.erase(it);
        break;
      }
    }
  }
  // Work already queued still runs (as on a GPU): the stream's thread ends once the queue is empty, when the
  // last reference (this one, or a task's) goes.
  return cudaSuccess;
}

cudaError_t cudaStreamSynchronize(cudaStream_t stream) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  auto keep = cudasim::stream_ref(s);
  return set_error(cudasim::synchronize(s));
}

cudaError_t cudaStreamQuery(cudaStream_t stream) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  if (cudaError_t e = cudasim::forbid_while_capturing(s, "cudaStreamQuery")) return e;
  std::lock_guard<std::mutex> lock(s->mu);
  return s->completed >= s->enqueued ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaStreamGetDevice(cudaStream_t stream, int* device) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  if (device == nullptr) return set_error(cudaErrorInvalidValue);
  *device = s->device;
  return cudaSuccess;
}

cudaError_t cudaStreamWaitEvent(cudaStream_t stream, cudaEvent_t event, unsigned int flags) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  if (flags != 0 && flags != cudaEventWaitDefault) return set_error(cudaErrorInvalidValue);
  auto e = cudasim::event_ref(event);
  if (!e) return set_error(cudaErrorInvalidResourceHandle, "cudaStreamWaitEvent on an event that is not live");
  bool captured = false;
  if (cudaError_t c = cudasim::wait_in_capture(s, e.get(), &captured)) return c;
  if (captured) return cudaSuccess;
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    target = e->recorded;
  }
  if (target == 0) return cudaSuccess;  // never recorded: nothing to wait for
  // An event of another device is allowed here (unlike cudaEventRecord).
  cudasim::enqueue(s, "cudaStreamWaitEvent", [e, target] {
    cudasim::wait_until(
        [&] {
          std::lock_guard<std::mutex> lock(e->mu);
          return e->completed >= target;
        },
        "cudaStreamWaitEvent");
  });
  return cudaSuccess;
}

cudaError_t cudaLaunchHostFunc(cudaStream_t stream, cudaHostFn_t fn, void* data) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  if (fn == nullptr) return set_error(cudaErrorInvalidValue);
  cudasim::enqueue(s, "cudaLaunchHostFunc", [fn, data] { fn(data); });
  return cudaSuccess;
}

cudaError_t cudaDeviceSynchronize(void) {
  const int device = cudasim::current_device();
  if (cudaError_t e = cudasim::check_device(device)) return set_error(e);
  if (cudaError_t e = cudasim::forbid_device_sync(device, "cudaDeviceSynchronize")) return e;
  cudasim::synchronize_device(device);
  return set_error(cudasim::sticky_error(device));
}

cudaError_t cudaEventCreateWithFlags(cudaEvent_t* event, unsigned int flags) {
  if (event == nullptr) return set_error(cudaErrorInvalidValue);
  if ((flags & ~(cudaEventDisableTiming | cudaEventBlockingSync | cudaEventInterprocess)) != 0)
    return set_error(cudaErrorInvalidValue, "unknown event flags");
  const int device = cudasim::current_device();
  if (cudaError_t e = cudasim::check_device(device)) return set_error(e);
  auto e = std::make_shared<CUevent_st>();
  e->device = device;
  e->flags = flags;
  std::lock_guard<std::mutex> lock(cudasim::registry_mu);
  cudasim::events()[e.get()] = e;
  *event = e.get();
  return cudaSuccess;
}

cudaError_t cudaEventCreate(cudaEvent_t* event) { return cudaEventCreateWithFlags(event, cudaEventDefault); }

cudaError_t cudaEventDestroy(cudaEvent_t event) {
  cudasim::forget_captured_event(event);  // before registry_mu: capture code takes that lock inside its own
  std::lock_guard<std::mutex> lock(cudasim::registry_mu);
  if (cudasim::events().erase(event) == 0)
    return set_error(cudaErrorInvalidResourceHandle, "cudaEventDestroy of an event that is not live");
  return cudaSuccess;  // a record still queued keeps its own reference
}

cudaError_t cudaEventRecord(cudaEvent_t event, cudaStream_t stream) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  auto e = cudasim::event_ref(event);
  if (!e) return set_error(cudaErrorInvalidResourceHandle, "cudaEventRecord of an event that is not live");
  if (e->device != s->device)
    return set_error(cudaErrorInvalidResourceHandle,
                     "cudaEventRecord: the event was created on cuda:" + std::to_string(e->device) +
                         " and the stream belongs to cuda:" + std::to_string(s->device) +
                         " (event and stream must share a context)");
  if (cudasim::record_in_capture(e.get(), s)) return cudaSuccess;  // it stands for captured work now
  uint64_t generation;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    generation = ++e->recorded;
  }
  // The event completes once the stream counts everything before it as done (so that a stream whose last
  // work is this record is idle when the event is complete).
  cudasim::enqueue_marked(
      s, "cudaEventRecord", [] {},
      [e, generation] {
        std::lock_guard<std::mutex> lock(e->mu);
        if (generation > e->completed) {
          e->completed = generation;
          e->time_ms = cudasim::now_ms();
        }
      });
  return cudaSuccess;
}

cudaError_t cudaEventQuery(cudaEvent_t event) {
  auto e = cudasim::event_ref(event);
  if (!e) return set_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t sticky = cudasim::sticky_error(e->device)) return set_error(sticky);
  if (cudaError_t c = cudasim::captured_event_error(e.get(), "cudaEventQuery")) return c;
  std::lock_guard<std::mutex> lock(e->mu);
  return e->completed >= e->recorded ? cudaSuccess : cudaErrorNotReady;
}

cudaError_t cudaEventSynchronize(cudaEvent_t event) {
  auto e = cudasim::event_ref(event);
  if (!e) return set_error(cudaErrorInvalidResourceHandle);
  if (cudaError_t c = cudasim::captured_event_error(e.get(), "cudaEventSynchronize")) return c;
  uint64_t target;
  {
    std::lock_guard<std::mutex> lock(e->mu);
    target = e->recorded;
  }
  cudasim::host_wait([&] {
    std::lock_guard<std::mutex> lock(e->mu);
    return e->completed >= target || cudasim::sticky_error(e->device) != cudaSuccess;
  });
  cudasim::release_pool_memory(e->device);
  return set_error(cudasim::sticky_error(e->device));
}

cudaError_t cudaEventElapsedTime(float* ms, cudaEvent_t start, cudaEvent_t end) {
  if (ms == nullptr) return set_error(cudaErrorInvalidValue);
  auto a = cudasim::event_ref(start), b = cudasim::event_ref(end);
  if (!a || !b) return set_error(cudaErrorInvalidResourceHandle);
  if ((a->flags & cudaEventDisableTiming) || (b->flags & cudaEventDisableTiming))
    return set_error(cudaErrorInvalidResourceHandle,
                     "cudaEventElapsedTime of an event created with cudaEventDisableTiming");
  std::lock_guard<std::mutex> la(a->mu);
  std::unique_lock<std::mutex> lb(b->mu, std::defer_lock);
  if (a.get() != b.get()) lb.lock();
  if (a->recorded == 0 || b->recorded == 0)
    return set_error(cudaErrorInvalidResourceHandle, "cudaEventElapsedTime of an event never recorded");
  if (a->completed < a->recorded || b->completed < b->recorded) return set_error(cudaErrorNotReady);
  *ms = static_cast<float>(b->time_ms - a->time_ms);
  return cudaSuccess;
}

}  // extern "C"
