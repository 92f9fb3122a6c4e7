// Workers: the units the parallel algorithms are written against — a CPU thread, a CUDA GPU, or a
// virtual GPU (an SM partition of one GPU) — each with its own streams and memory tracker.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/base/non_copyable.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/stream.h"

namespace tandem {
namespace parallel {

enum class WorkerKind { CpuThread, CudaDevice, CudaPartition };

struct Worker {
  int rank = 0;
  WorkerKind kind = WorkerKind::CpuThread;
  Device device;
  int partition = 0;                      // CudaPartition: which SM partition of `device`
  int partitions = 1;                     // CudaPartition: how many partitions `device` is split into
  int sm_count = 0;                       // SMs this worker may use (0: unknown or all)
  bool green_context = false;             // true when the partition is a real green context, false for plain streams
  Stream compute;                         // where this worker's computation is queued
  Stream comm;                            // where its communication is queued (on the CPU both are tags, see Stream)
  std::shared_ptr<MemoryTracker> memory;  // every allocation made on this worker's thread
  std::string name() const;               // e.g. "cpu#2", "cuda:1", "cuda:0/4#3"
};

// Parses a worker spec: "cpu:N" (N CPU threads), "cuda:I" or "cuda:I-J" (one worker per GPU),
// "cuda:I/P" (P SM partitions of GPU I), comma-separated lists of those ("cuda:0/2,cuda:1/2"), or "best:N"
// (cuda:0/N when a GPU is present, else cpu:N); "cpu" and "cuda" alone mean cpu:1 and cuda:0. A spec also
// accepts "cuda:I-J/P". Throws ValueError with the reason for a bad spec (including a GPU named twice, or CPU
// and CUDA workers mixed), and DeviceError when a named GPU does not exist.
std::vector<Worker> make_workers(const std::string& spec);

// The number of workers `spec` names, checked as make_workers checks it; creates no stream or context.
int count_workers(const std::string& spec);

// Worker `rank` of `spec` alone, as make_workers(spec)[rank] is (rank, name, device, partition), with streams
// (and a context) on its own GPU only: what one process of a multi-process run needs, where making every
// worker would put contexts of every process on every GPU (and fail on GPUs in exclusive-process mode).
// Throws ValueError when the spec has no such rank.
Worker make_worker(const std::string& spec, int rank);

// Runs fn(worker) on one thread per worker with the worker's device, compute stream and memory scope set
// and one intra-op thread each, each thread prepared for its device (prepare_cuda_thread: library handles made
// and kernels loaded) before any of them starts fn; joins them all and rethrows the first exception (by rank)
// after all ended.
// A worker that fails makes its peers blocked in a local communicator throw too (see peer_worker_failed),
// and their errors rank after the failure that caused them. On CUDA, each thread synchronizes its worker's
// streams before it ends, so errors of queued work are reported by the worker that queued it.
void run_on_workers(std::vector<Worker>& workers, const std::function<void(Worker&)>& fn);

// On a run_on_workers thread: true once another worker of the same call has failed (false elsewhere).
// Blocking waits in the local communicator poll it, so a failure never leaves the other workers hanging.
bool peer_worker_failed();
// The BackendError of a worker that stops because a peer failed; run_on_workers (and an executor, between its
// lanes) reports the peer's own error in preference to this one, whichever thread threw it.
class PeerWorkerFailed : public BackendError {
 public:
  using BackendError::BackendError;
};
[[noreturn]] void throw_peer_worker_failed(const std::string& where);

// The run_on_workers call the calling thread works for (null elsewhere). A worker's helper thread (e.g. an
// executor's comm lane) joins it with RunStateGuard, so that its blocking waits also see peers fail.
struct RunState;
RunState* current_run_state();
class RunStateGuard : NonCopyable {
 public:
  explicit RunStateGuard(RunState* state);
  ~RunStateGuard();

 private:
  RunState* previous_;
};
// Marks the current run as failed now (before the failing worker returns), so that peers and this worker's
// other threads blocked in a communicator stop waiting. No-op outside run_on_workers.
void report_worker_failure();

}  // namespace parallel
}  // namespace tandem
