// The simulated CUDA device's internal interface: devices, streams, memory and faults, shared by the parts
// that implement NVIDIA's APIs (runtime.cc, memory.cc, driver.cc, simt.cc, cublas.cc, cudnn.cc, nccl.cc).
//
// The simulator implements the C APIs exactly as NVIDIA's headers declare them (it is compiled against the
// real headers), so Tandem's host code is the same object code in both builds and only links against other
// libraries. Opaque handles (cudaStream_t, cudaEvent_t, cudnnHandle_t, ...) point to the simulator's structs.
#pragma once

#include <cuda_runtime_api.h>

#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

namespace cudasim {

// ---- configuration (read once from the environment) ----

enum class ThreadOrder { Forward, Reverse, Random };

struct Config {
  int devices = 4;                           // TANDEM_CUDASIM_DEVICES
  int sms = 32;                              // TANDEM_CUDASIM_SMS: SMs per device
  size_t memory_bytes = size_t{4} << 30;     // TANDEM_CUDASIM_MEMORY_MB: memory per device
  ThreadOrder order = ThreadOrder::Forward;  // TANDEM_CUDASIM_ORDER=forward|reverse|random
  uint64_t order_seed = 0;                   // TANDEM_CUDASIM_SEED (random order)
  int host_threads = 2;                      // TANDEM_CUDASIM_THREADS: host threads running blocks
  double watchdog_s = 300;                   // TANDEM_CUDASIM_WATCHDOG_S: a blocked stream becomes a fault
};
const Config& config();

// ---- faults: errors of work that runs on a simulated device ----

// Thrown inside a stream task (a kernel, a copy, a library call) when the work does what a GPU would refuse:
// an illegal address, a barrier or shuffle misuse, a deadlock, a NCCL mismatch. The stream's device then
// holds `code` as its sticky error (every later call that touches the device returns it), and `message`
// (which names the kernel or call, and file:line where known) is appended to cudaGetErrorString(code).
struct Fault {
  cudaError_t code;
  std::string message;
};
[[noreturn]] void fault(cudaError_t code, const std::string& message);

// ---- call counts (tandem_cudasim_call_count) ----

// Counts one call of `name`, which tests read with tandem_cudasim_call_count(name) (0 for a name never counted).
// The names: every API function that creates or destroys a cuDNN handle or descriptor ("cudnnCreate",
// "cudnnCreateTensorDescriptor", ...), "cudaSetDevice", "cudaGetDevice", "cudaMalloc", "cudaMallocAsync",
// "cudaMallocFromPoolAsync" (calls, whatever their outcome); the outcome of each stream-ordered allocation of
// more than 0 bytes: "pool reuse" (a block the pool already held) or "pool growth" (memory newly taken from the
// device); and "kernel NAME" per kernel launch, NAME as launched (TD_KERNEL's text, e.g. "fill_kernel<T>").
void count_call(const std::string& name);

// ---- the runtime API's error state ----

// Records `e` as the calling thread's last error (cudaGetLastError) unless it is cudaSuccess, and returns
// it. `detail` (optional) is what cudaGetErrorString(e) adds after NVIDIA's text until the next detail.
cudaError_t set_error(cudaError_t e, const std::string& detail = "");

// ---- devices ----

int device_count();
// The calling host thread's current device (cudaSetDevice); 0 until set.
int current_device();
// The device's sticky error: cudaSuccess unless a fault has lost its context.
cudaError_t sticky_error(int device);
// cudaErrorInvalidDevice when `device` is out of range, else the device's sticky error.
cudaError_t check_device(int device);

// ---- streams ----

// The simulator's stream: cudaStream_t and CUstream point to one (struct CUstream_st is defined in state.h).
using StreamImpl = ::CUstream_st;
// Resolves a stream handle given to an API: nullptr and cudaStreamLegacy are the legacy default stream of the
// current device, cudaStreamPerThread the current device's per-thread stream. Returns nullptr and sets *err
// (cudaErrorInvalidResourceHandle, or the device's sticky error) when the handle cannot be used.
StreamImpl* resolve_stream(cudaStream_t s, cudaError_t* err);
int stream_device(const StreamImpl* s);
// The SMs kernels of this stream may use (all SMs of the device, or a green context's).
const std::vector<int>& stream_sms(const StreamImpl* s);
// Queues `task` on the stream: it runs on the stream's own host thread after everything queued before it,
// while the caller goes on. `what` names the work in fault messages and the watchdog's report. A task that
// throws Fault sets its device's sticky error; once a device has one, its queued tasks are skipped.
void enqueue(StreamImpl* s, const std::string& what, std::function<void()> task);
// Blocks until everything queued on the stream so far has run; returns the device's sticky error.
cudaError_t synchronize(StreamImpl* s);
// Blocks the calling host thread (inside a stream task) until `ready()` is true, waking on notify_all(). A
// wait longer than config().watchdog_s throws Fault(cudaErrorLaunchTimeout) naming `what`.
void wait_until(const std::function<bool()>& ready, const std::string& what);
// Wakes every wait_until (call after changing what their ready() reads, with no lock held).
void notify_all();

// ---- memory ----

enum class MemoryKind { Device, Pool, PinnedHost };
struct Allocation {
  char* base = nullptr;
  size_t bytes = 0;
  int device = -1;  // -1 for pinned host memory
  MemoryKind kind = MemoryKind::Device;
};
// The live allocation that contains p (false if none).
bool find_allocation(const void* p, Allocation* out);
// Whether work running on `device` may read or write [p, p + bytes): memory of that device, memory of another
// device that it may access (peer access for cudaMalloc memory, cudaMemPoolSetAccess for pool memory), or
// pinned host memory. "" when it may, else the reason, naming `what`. Ask when the work is queued: the
// registry follows the host's calls (a pool block freed and allocated again on a stream changes at once),
// so a check made later, inside the stream's task, could see a newer allocation.
std::string access_problem(int device, const void* p, size_t bytes, const std::string& what);

// A buffer that queued work touches, and its name in a fault message.
struct Access {
  const void* ptr;
  size_t bytes;
  std::string what;
};
// Queues `work` on s after checking every access now (access_problem); when one is refused, a task that faults
// with cudaErrorIllegalAddress is queued instead, so the device gets its sticky error in stream order, as from
// a kernel given such a pointer.
void enqueue_checked(StreamImpl* s, int device, const std::string& what, const std::vector<Access>& accesses,
                     std::function<void()> work);

}  // namespace cudasim
