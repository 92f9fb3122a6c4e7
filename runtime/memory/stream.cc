// Stream and Event implementations, and the thread-local current device/stream.
#include "runtime/memory/stream.h"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <map>
#include <mutex>
#include <vector>

#include "runtime/base/cuda_check.h"
#include "runtime/base/device_errors.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/memory/stream_check.h"

namespace tandem {

struct Stream::Impl {
  uint64_t id = next_id();
  cudaStream_t stream = nullptr;  // nullptr for a CPU tag
  bool owned = false;
  int device = 0;
  static uint64_t next_id() {
    static std::atomic<uint64_t> last{0};
    return ++last;
  }
  ~Impl() {
    if (owned && stream != nullptr) {
      int prev = device;
      ignore_cuda_error(cudaGetDevice(&prev), "cudaGetDevice");
      if (prev != device) ignore_cuda_error(cudaSetDevice(device), "cudaSetDevice");
      ignore_cuda_error(cudaStreamDestroy(stream), "cudaStreamDestroy");
      if (prev != device) ignore_cuda_error(cudaSetDevice(prev), "cudaSetDevice");
    }
  }
};

namespace {
// Runs `fn` with the CUDA runtime's current device set to `index`, restoring it afterwards.
template <typename F>
void on_cuda_device(int index, F&& fn) {
  int prev = 0;
  TD_CUDA_CHECK(cudaGetDevice(&prev));
  if (prev != index) TD_CUDA_CHECK(cudaSetDevice(index));
  try {
    fn();
  } catch (...) {
    if (prev != index) ignore_cuda_error(cudaSetDevice(prev), "cudaSetDevice (restoring the device)");
    throw;
  }
  if (prev != index) TD_CUDA_CHECK(cudaSetDevice(prev));
}
}  // namespace

Stream Stream::create(Device device, int priority) {
  Stream s;
  s.device_ = device;
  auto impl = std::make_shared<Impl>();
  if (device.is_cpu()) {
    s.impl_ = std::move(impl);
    return s;
  }
  check_device_available(device);
  impl->device = device.index;
  on_cuda_device(device.index,
                 [&] { TD_CUDA_CHECK(cudaStreamCreateWithPriority(&impl->stream, cudaStreamNonBlocking, priority)); });
  impl->owned = true;
  s.impl_ = std::move(impl);
  return s;
}

Stream Stream::wrap(Device device, CUstream_st* stream, bool owned) {
  Stream s;
  s.device_ = device;
  if (device.is_cpu()) return s;
  auto impl = std::make_shared<Impl>();
  impl->device = device.index;
  impl->stream = stream;
  impl->owned = owned;
  s.impl_ = std::move(impl);
  return s;
}

CUstream_st* Stream::cuda() const { return impl_ ? impl_->stream : nullptr; }
uint64_t Stream::id() const { return impl_ ? impl_->id : 0; }

bool Stream::operator==(const Stream& o) const {
  return device_ == o.device_ && (device_.is_cpu() ? id() == o.id() : cuda() == o.cuda());
}

void Stream::synchronize() const {
  check_not_capturing(*this, "Stream::synchronize", "synchronize after replay(), not inside the captured step");
  if (device_.is_cuda()) TD_CUDA_CHECK(cudaStreamSynchronize(cuda()));
  // The work is complete even when it flagged an error: the host knows it before raising that error.
  if (stream_check::enabled()) stream_check::on_synchronize(*this);
  if (device_.is_cuda()) raise_device_errors(device_);
}

void Stream::wait(const Event& event) const {
  // A CPU stream does not wait for CUDA work (its ops run on the host at once), so that orders nothing.
  const bool orders = device_.is_cuda() || event.device().is_cpu();
  if (stream_check::enabled() && event.recorded() && event.clock_ && orders)
    stream_check::on_wait(*this, *event.clock_);
  if (device_.is_cpu() || !event.recorded() || event.device().is_cpu()) return;
  TD_CUDA_CHECK(cudaStreamWaitEvent(cuda(), event.cuda(), 0));
}

namespace {
thread_local int tl_lane_depth = 0;
std::atomic<int64_t> lane_pageable{0};
}  // namespace

LaneScope::LaneScope() { ++tl_lane_depth; }
LaneScope::~LaneScope() { --tl_lane_depth; }
bool in_lane() { return tl_lane_depth > 0; }

void note_pageable_copy(Device device, size_t bytes) {
  if (tl_lane_depth == 0) return;
  if (lane_pageable.fetch_add(1) == 0)
    std::fprintf(stderr,
                 "tandem: a copy of %zu bytes from pageable host memory to %s inside a schedule's lane stalls "
                 "the lane until it has run (use pinned memory: TensorOptions::with_pinned)\n",
                 bytes, device.str().c_str());
}

int64_t lane_pageable_copies() { return lane_pageable.load(); }

double host_time_s() {
  static const auto start = std::chrono::steady_clock::now();
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

Event::Event(bool timing) : timing_(timing) {}

Event::~Event() {
  if (event_ != nullptr) ignore_cuda_error(cudaEventDestroy(event_), "cudaEventDestroy");
}

Event::Event(Event&& o) noexcept
    : timing_(o.timing_),
      recorded_(o.recorded_),
      device_(o.device_),
      event_(o.event_),
      host_time_s_(o.host_time_s_),
      clock_(std::move(o.clock_)) {
  o.event_ = nullptr;
  o.recorded_ = false;
}

Event& Event::operator=(Event&& o) noexcept {
  if (this != &o) {
    if (event_ != nullptr) ignore_cuda_error(cudaEventDestroy(event_), "cudaEventDestroy");
    timing_ = o.timing_;
    recorded_ = o.recorded_;
    device_ = o.device_;
    event_ = o.event_;
    host_time_s_ = o.host_time_s_;
    clock_ = std::move(o.clock_);
    o.event_ = nullptr;
    o.recorded_ = false;
  }
  return *this;
}

void Event::record(const Stream& stream) {
  clock_ = stream_check::enabled() ? stream_check::on_record(stream) : nullptr;
  if (stream.device().is_cpu()) {
    TD_CHECK_DEVICE(event_ == nullptr, "an Event created on ", device_, " cannot be recorded on the CPU stream");
    device_ = stream.device();
    host_time_s_ = host_time_s();
    recorded_ = true;
    return;
  }
  if (event_ == nullptr) {
    device_ = stream.device();
    on_cuda_device(device_.index, [&] {
      TD_CUDA_CHECK(cudaEventCreateWithFlags(&event_, timing_ ? cudaEventDefault : cudaEventDisableTiming));
    });
  }
  TD_CHECK_DEVICE(device_ == stream.device(), "an Event created on ", device_, " cannot be recorded on a stream of ",
                  stream.device());
  TD_CUDA_CHECK(cudaEventRecord(event_, stream.cuda()));
  recorded_ = true;
}

void Event::synchronize() const {
  if (!recorded_) return;
  if (event_ != nullptr) TD_CUDA_CHECK(cudaEventSynchronize(event_));
  if (stream_check::enabled() && clock_) stream_check::on_synchronize(*clock_);
  if (event_ != nullptr) raise_device_errors(device_);
}

bool Event::query() const {
  if (event_ == nullptr || !recorded_) return true;
  cudaError_t err = cudaEventQuery(event_);
  if (err == cudaErrorNotReady) return false;
  TD_CUDA_CHECK(err);
  return true;
}

float Event::elapsed_ms(const Event& end) const {
  TD_CHECK(recorded_ && end.recorded_, "elapsed_ms needs two recorded events");
  if (device_.is_cpu() && end.device_.is_cpu()) return static_cast<float>((end.host_time_s_ - host_time_s_) * 1e3);
  TD_CHECK(timing_ && end.timing_, "elapsed_ms on CUDA needs events created with timing = true");
  float ms = 0;
  TD_CUDA_CHECK(cudaEventElapsedTime(&ms, event_, end.event_));
  return ms;
}

namespace {
thread_local Device tl_device = Device::cpu();
thread_local std::map<int, Stream>* tl_streams = nullptr;  // CUDA device index (-1: CPU) -> current stream

std::map<int, Stream>& thread_streams() {
  if (tl_streams == nullptr) tl_streams = new std::map<int, Stream>();  // leaked on purpose: usable in destructors
  return *tl_streams;
}

int stream_key(Device device) { return device.is_cpu() ? -1 : device.index; }
}  // namespace

Device current_device() { return tl_device; }

Stream default_stream(Device device) {
  if (device.is_cpu()) return Stream();
  static std::mutex mu;
  static std::map<int, Stream> defaults;
  std::lock_guard<std::mutex> lock(mu);
  auto it = defaults.find(device.index);
  if (it != defaults.end()) return it->second;
  Stream s = Stream::create(device);
  defaults.emplace(device.index, s);
  return s;
}

Stream current_stream(Device device) {
  auto& m = thread_streams();
  auto it = m.find(stream_key(device));
  if (it != m.end()) return it->second;
  return default_stream(device);
}

std::vector<Stream> current_streams() {
  std::vector<Stream> out;
  for (const auto& entry : thread_streams()) out.push_back(entry.second);
  return out;
}

void set_current_streams(const std::vector<Stream>& streams) {
  auto& m = thread_streams();
  m.clear();
  for (const Stream& s : streams) m[stream_key(s.device())] = s;
}

DeviceGuard::DeviceGuard(Device device) : previous_(tl_device) {
  if (device.is_cuda()) {
    check_device_available(device);
    int current = 0;
    TD_CUDA_CHECK(cudaGetDevice(&current));
    if (current != device.index) {
      TD_CUDA_CHECK(cudaSetDevice(device.index));
      previous_cuda_ = current;
    }
  }
  tl_device = device;
}

DeviceGuard::~DeviceGuard() {
  tl_device = previous_;
  if (previous_cuda_ >= 0) ignore_cuda_error(cudaSetDevice(previous_cuda_), "cudaSetDevice (restoring the device)");
}

StreamGuard::StreamGuard(const Stream& stream) : device_guard_(stream.device()), device_(stream.device()) {
  auto& m = thread_streams();
  auto it = m.find(stream_key(device_));
  if (it != m.end()) {
    previous_ = it->second;
    had_previous_ = true;
  }
  m[stream_key(device_)] = stream;
}

StreamGuard::~StreamGuard() {
  auto& m = thread_streams();
  if (had_previous_)
    m[stream_key(device_)] = previous_;
  else
    m.erase(stream_key(device_));
}

}  // namespace tandem
