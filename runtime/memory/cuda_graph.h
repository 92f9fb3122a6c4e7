// CudaGraph: the work a step queues on a CUDA stream, captured once as a CUDA graph and replayed; GraphCapture: what
// code running inside the capture uses to stay correct across replays (values read from device memory that the host
// sets before each replay, host bookkeeping each replay repeats) and the checks that name what a capture forbids.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/non_copyable.h"
#include "runtime/memory/stream.h"

struct CUgraph_st;
struct CUgraphExec_st;

namespace tandem {

// The capture in progress on the calling thread (inside CudaGraph::capture's step). Capture runs nothing: the host
// code of the step runs once, recording the device work, and every replay repeats only that device work. So state the
// host advances per step (optimizer step counts, learning rates, random offsets, counters) must come from device
// memory the replay reads, set before each replay by the hooks registered here.
class GraphCapture : NonCopyable {
 public:
  const Stream& stream() const { return stream_; }
  uint64_t id() const { return id_; }
  // 8 bytes of device memory the graph may read, set to value() on the host before every replay (in registration
  // order, after the on_replay hooks). The pointer stays valid as long as the graph.
  const double* replay_double(std::function<double()> value);
  const uint64_t* replay_u64(std::function<uint64_t()> value);
  // Host work every replay repeats before its values are computed, in registration order (e.g. a step count).
  void on_replay(std::function<void()> fn);
  // Runs when the capture ends, successful or not: restores host state the capture's single run of the step changed
  // although no device work ran (e.g. a generator's offset).
  void on_end(std::function<void()> fn);
  // A value kept per capture under `key` (e.g. one replay value per generator): made by make() on first use.
  const void* keyed(const void* key, const std::function<const void*()>& make);

  // The allocator's view: allocations made in the capture are graph memory and must be freed in it.
  void note_allocation(size_t bytes);
  void note_free(size_t bytes);
  // A free of memory allocated before the capture (which the graph may use at every replay): refused; `free` runs
  // once the capture has ended, and the capture fails naming `what`.
  void defer_free(const std::string& what, std::function<void()> free);

 private:
  friend class CudaGraph;
  GraphCapture(const Stream& stream, uint64_t id, double* slots, size_t capacity);
  const void* slot(std::function<uint64_t()> bits);
  Stream stream_;
  uint64_t id_;
  double* slots_;  // device memory
  size_t capacity_;
  std::vector<std::function<uint64_t()>> values_;
  std::vector<std::function<void()>> replay_hooks_, end_hooks_;
  std::vector<std::pair<const void*, const void*>> keyed_;
  int64_t live_allocations_ = 0, live_bytes_ = 0;
  std::vector<std::string> refused_frees_;
  std::vector<std::function<void()>> deferred_frees_;
};

// The capture in progress on this thread, or nullptr.
GraphCapture* active_capture();
// Throws GraphCaptureError when `stream` is being captured by this thread's capture: `what` (an operation that must
// read or wait for device work on the host) cannot be done while capturing; `fix` says what to do instead.
void check_not_capturing(const Stream& stream, const std::string& what, const std::string& fix);

// Which threads a capture restricts (CUDA's stream capture modes). Global: every thread of the process is refused the
// calls a capture forbids (allocating outside the stream-ordered pool, synchronizing, ...) while it lasts, which keeps
// a library that works on the side from breaking a one-thread step's capture unnoticed. ThreadLocal: only the
// capturing thread is, so that other threads (the other workers of a parallel run, a worker's comm lane) go on
// working while one of them captures.
enum class CaptureMode { Global, ThreadLocal };

class CudaGraph : NonCopyable {
 public:
  CudaGraph();
  ~CudaGraph();
  // Captures the work `step` queues on `stream` (a CUDA stream, made the current stream while step runs) in `mode`.
  // Everything the step keeps beyond itself (parameters, gradients, optimizer state, outputs) must exist
  // before: run the step once eagerly first. Throws GraphCaptureError naming what the step did that a capture
  // forbids (a host read of a device value, a synchronization, a tensor allocated in the capture that outlives it, a
  // free of one allocated before it, a lazily created library handle, ...); the graph is then not captured.
  void capture(const Stream& stream, const std::function<void()>& step, CaptureMode mode = CaptureMode::Global);
  // Repeats the replay hooks, sets the replay values, and launches the graph on its stream (asynchronously).
  void replay();
  bool captured() const { return exec_ != nullptr; }
  // The graph's nodes: kernels and library calls, copies, memsets, allocations and frees (what a replay launches
  // with one call).
  size_t nodes() const { return nodes_; }
  const Stream& stream() const { return stream_; }

 private:
  void reset();
  Stream stream_;
  CUgraph_st* graph_ = nullptr;
  CUgraphExec_st* exec_ = nullptr;
  size_t nodes_ = 0;
  std::unique_ptr<GraphCapture> hooks_;  // the capture's replay values and hooks
  struct Staging;
  std::unique_ptr<Staging> staging_;
};

}  // namespace tandem
