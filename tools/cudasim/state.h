// The simulated device's state behind the opaque CUDA handles: devices, streams, events and memory pools.
// Internal to tools/cudasim (the API parts share it); the other libraries use sim.h.
#pragma once

#include <cuda_runtime_api.h>

#include <atomic>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "tools/cudasim/sim.h"

// A queue of device work run in order by its own host thread (cudaStream_t points to one).
struct CUstream_st {
  struct Task {
    std::string what;
    std::function<void()> fn;
    std::function<void()> then;  // runs once the stream counts the task as done (event records)
  };
  uint64_t id = 0;  // unique per process: names the stream, keys stream-ordered pool reuse
  int device = 0;
  unsigned flags = 0;  // cudaStreamNonBlocking or 0
  int priority = 0;
  bool legacy = false;   // the legacy default stream of its device
  std::vector<int> sms;  // SMs its kernels may use
  std::mutex mu;
  std::condition_variable cv;
  std::deque<Task> queue;
  uint64_t enqueued = 0;   // tasks queued so far
  uint64_t completed = 0;  // tasks run so far
  std::string running;     // the task running now ("" when idle)
  bool stopping = false;
  std::thread thread;
};

// A marker in a stream (cudaEvent_t points to one). Each record has a generation; the event is complete when
// the generation recorded last has run.
struct CUevent_st {
  int device = 0;
  unsigned flags = 0;
  std::mutex mu;
  uint64_t recorded = 0;
  uint64_t completed = 0;
  double time_ms = 0;  // host time when the completed generation ran
};

namespace cudasim {

constexpr const char* kDeviceName = "Tandem simulated GPU (cudasim)";
constexpr size_t kSharedMemPerBlock = 48 << 10;
constexpr size_t kSharedMemPerBlockOptin = 227 << 10;
constexpr int kMaxThreadsPerBlock = 1024;

struct PoolState;

struct DeviceState {
  DeviceState(int index_, int sms) : index(index_), sm_blocks(new std::atomic<uint64_t>[static_cast<size_t>(sms)]) {
    for (int i = 0; i < sms; ++i) {
      all_sms.push_back(i);
      sm_blocks[static_cast<size_t>(i)] = 0;
    }
  }
  const int index;
  std::atomic<int> sticky{0};
  std::mutex mu;                                      // guards the fields below
  std::set<int> peers;                                // devices whose cudaMalloc memory this one may access
  std::vector<std::shared_ptr<CUstream_st>> streams;  // live streams, the legacy one included
  std::shared_ptr<CUstream_st> legacy;
  size_t reserved = 0;  // bytes held: cudaMalloc, pools (used and cached), library allocations
  PoolState* default_pool = nullptr;
  std::vector<int> all_sms;
  std::unique_ptr<std::atomic<uint64_t>[]> sm_blocks;  // blocks run by each SM
};

DeviceState& device_state(int device);
void set_current_device(int device);
// Makes the fault the device's sticky error (the first one stays) and reports it on stderr once.
void set_sticky(int device, const Fault& f);

// Streams (stream.cc).
// enqueue, with `then` run once the stream counts the task as done (an event completes only when the work
// before it is all counted done, so that a stream whose last work is an event record is idle then).
void enqueue_marked(StreamImpl* s, const std::string& what, std::function<void()> task, std::function<void()> then);
std::shared_ptr<CUstream_st> create_stream(int device, unsigned flags, int priority, std::vector<int> sms);
// The shared owner of a live stream handle (null when the handle is not a live stream).
std::shared_ptr<CUstream_st> stream_ref(const CUstream_st* s);
// Host time in milliseconds since the simulator started (event timestamps).
double now_ms();
// Waits on the host until `ready()` (no watchdog: the device side has its own).
void host_wait(const std::function<bool()>& ready);
// Waits until every stream of `device` has run what was queued on it so far.
void synchronize_device(int device);
// What the driver does before it loads a module into a device's context (creating a cuBLAS or cuDNN handle loads
// the library's; a kernel's first launch, or cudaFuncGetAttributes, loads the kernel's): waits on the host until
// every stream of `device` has run what was queued on it so far. A wait longer than config().watchdog_s (a
// stream blocked by a host function, a kernel or a peer that waits for this very thread) gives the device a
// sticky fault (cudaErrorLaunchTimeout) naming `who` and the streams it waits for, and returns false.
bool wait_device_idle(int device, const std::string& who);
// Loads kernel `fn` (the function its launch helper gets) on `device` unless it is loaded: waits for the device as
// wait_device_idle does (`who` names the load in the fault). False when that wait timed out.
bool load_kernel(int device, const void* fn, const std::string& who);

// Memory (memory.cc): bytes held against the device's limit by the simulator's libraries (cuBLAS, cuDNN and
// NCCL handles). Returns false when the device has not that much memory left.
bool reserve(int device, size_t bytes);
void unreserve(int device, size_t bytes);
// Returns cached pool memory of `device` above each pool's release threshold (at synchronizations).
void release_pool_memory(int device);
// A pool block that queued work touches, with the block's allocation when the work was queued: the work may
// run only while that allocation's cudaMallocAsync has run and its cudaFreeAsync has not (memory.cc).
struct BlockLife;
struct PoolUse {
  std::shared_ptr<BlockLife> life;
  uint64_t allocation = 0;
  const void* ptr = nullptr;  // the address the work was given
  const char* base = nullptr;
  size_t bytes = 0;
  int device = 0;
  uint64_t alloc_stream = 0, free_stream = 0;
  bool freed = false;           // freed in host order before the work was queued
  bool parameter_word = false;  // found in a kernel's parameters (which may be padding or a non-pointer)
};
// Checks the pointers a kernel receives (any 8-byte word of its parameters that points into device memory)
// against what the launching device may access; returns "" or what the kernel would fault on. Adds the pool
// blocks they point into to *uses.
std::string check_kernel_pointers(int device, const void* params, size_t bytes, std::vector<PoolUse>* uses);
// Inside the task of `what` on stream s: faults (cudaErrorIllegalAddress) when a block of `uses` is not in the
// allocation it had when the work was queued: its stream-ordered allocation has not run yet (nothing ordered s
// after the allocating stream), or its free has run (nothing ordered the free after this work).
void check_pool_uses(const std::vector<PoolUse>& uses, const StreamImpl* s, const std::string& what);

}  // namespace cudasim
