// Stream and Event (RAII, CPU or CUDA), and the thread-local current device and stream with their guards.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/non_copyable.h"

struct CUstream_st;
struct CUevent_st;

namespace tandem {

class Event;
namespace stream_check {
struct Clock;
}

// A queue of work on one device. On the CPU, ops run synchronously on the calling thread and a Stream is a tag:
// the order it declares (events, waits, record_stream) is what the stream checker (stream_check.h) verifies,
// so that the same code is correct on a GPU. Copies share the same underlying stream; the CUDA stream is
// destroyed with the last copy.
class Stream {
 public:
  Stream() = default;  // the default CPU stream (the host's)
  // A new CUDA stream on `device` (non-blocking with respect to the legacy stream), or a new CPU tag.
  static Stream create(Device device, int priority = 0);
  // Wraps a stream created elsewhere (e.g. a green-context stream); `owned` streams are destroyed with this.
  static Stream wrap(Device device, CUstream_st* stream, bool owned);

  Device device() const { return device_; }
  CUstream_st* cuda() const;  // nullptr on the CPU
  // A process-unique number naming this stream in the checker's messages (0: the default CPU stream).
  uint64_t id() const;
  void synchronize() const;
  // Later work on this stream waits until `event` has completed.
  void wait(const Event& event) const;
  // CPU streams are equal when they are copies of one tag; CUDA streams when they wrap the same CUDA stream.
  bool operator==(const Stream& o) const;
  bool operator!=(const Stream& o) const { return !(*this == o); }

 private:
  struct Impl;
  Device device_ = Device::cpu();
  std::shared_ptr<Impl> impl_;
};

// A marker in a stream's work. On the CPU, record() completes immediately and stores the host time. While the
// stream checker runs, record() also keeps the stream's clock, which wait() and synchronize() hand on.
class Event : NonCopyable {
 public:
  explicit Event(bool timing = false);
  ~Event();
  Event(Event&&) noexcept;
  Event& operator=(Event&&) noexcept;

  void record(const Stream& stream);
  void synchronize() const;
  bool query() const;  // true when completed (or never recorded)
  bool recorded() const { return recorded_; }
  // Milliseconds from this event to `end`; both must be recorded, with timing on CUDA.
  float elapsed_ms(const Event& end) const;
  CUevent_st* cuda() const { return event_; }
  Device device() const { return device_; }

 private:
  bool timing_;
  bool recorded_ = false;
  Device device_ = Device::cpu();
  CUevent_st* event_ = nullptr;
  double host_time_s_ = 0;                            // CPU events
  std::shared_ptr<const stream_check::Clock> clock_;  // the stream's clock when recorded (while checking)
  friend class Stream;
};

// The device factories use when none is given (thread-local; starts as the CPU).
Device current_device();
// The stream ops on `device` are queued on (thread-local; starts as the device's default stream). On the CPU
// it is the tag a StreamGuard set (e.g. an executor lane's), else the default CPU stream.
Stream current_stream(Device device);
inline Stream current_stream() { return current_stream(current_device()); }
// The per-device default stream shared by threads that set none.
Stream default_stream(Device device);
// The streams StreamGuards made current on this thread (one per device), and their replacement by another set
// (ThreadContext carries a thread's streams to another: runtime/tensor/thread_context.h).
std::vector<Stream> current_streams();
void set_current_streams(const std::vector<Stream>& streams);

// Sets the current device for this thread while in scope (and the CUDA device for CUDA runtime calls). The CUDA
// device is asked of the runtime (cudaGetDevice, a cheap call) and set, and restored after, only when it differs:
// every backend method enters one, and the device it finds current is nearly always its own. A cache of the
// device would go stale when user code calls cudaSetDevice itself.
class DeviceGuard : NonCopyable {
 public:
  explicit DeviceGuard(Device device);
  ~DeviceGuard();

 private:
  Device previous_;
  int previous_cuda_ = -1;
};

// Sets the current stream of the stream's device, and that device as current, while in scope.
class StreamGuard : NonCopyable {
 public:
  explicit StreamGuard(const Stream& stream);
  ~StreamGuard();

 private:
  DeviceGuard device_guard_;
  Device device_;
  Stream previous_;
  bool had_previous_ = false;
};

// Host seconds since process start (steady clock); one time base for traces and memory records.
double host_time_s();

// Marks the calling thread, while in scope, as a schedule's lane (the executor sets it). A copy from pageable
// host memory to a GPU there stalls the lane's thread until the copy has run (CUDA stages it; from pinned
// memory it would not): Tandem counts such copies and says so once on stderr. (A read back to the host waits
// for its value anyway.)
class LaneScope : NonCopyable {
 public:
  LaneScope();
  ~LaneScope();
};
// Whether the calling thread is a schedule's lane now.
bool in_lane();
// Called by copies from pageable host memory to `device`: counts the copy if the thread is a lane.
void note_pageable_copy(Device device, size_t bytes);
// Pageable copies made inside lanes since the process started.
int64_t lane_pageable_copies();

}  // namespace tandem
