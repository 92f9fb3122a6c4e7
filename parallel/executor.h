// Executor: runs one worker's part of a Schedule — a host thread per lane, each lane on its own stream
// (CUDA) or thread (CPU), dependencies across lanes by events, across workers by the communicator.
#pragma once

#include <functional>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/schedule.h"
#include "parallel/worker.h"

namespace tandem {
namespace parallel {

// When an instruction ran, in seconds since host_time_s()'s origin (the same clock on every worker).
struct InstrTime {
  int id = -1;
  double start_s = 0;
  double end_s = 0;
};

// Why Cyclic DP's schedules are not captured as CUDA graphs (tools:cyclic --cuda-graph says it).
extern const char* const kScheduleCaptureLimits;

class Executor {
 public:
  // `comm` realizes dependencies on other workers' instructions that no Send->Recv pair already carries
  // (a one-element signal message per such dependency); it may be null when there are none.
  //
  // Lanes are issued by one host thread each, unless `one_issuer` is set or `comm` needs one issuer (NCCL):
  // then one thread issues both lanes' instructions in id order, each on its lane's stream (on CUDA the
  // lanes still overlap on the device; on the CPU they run one after another). That order must respect
  // every same-worker dependency across lanes (a dependency on a later id is a ValueError).
  Executor(const Schedule& schedule, Worker& worker, Communicator* comm, bool one_issuer = false);

  // Runs this worker's instructions in program order per lane: fn(instr) performs one, with the lane's
  // stream current. On CUDA the work is queued, not waited for: the host never synchronizes with the
  // device inside run(). The comm lane starts after the work queued on the compute stream before run(), and
  // the compute stream is ordered after both lanes when it returns. Call from the worker's thread (see
  // run_on_workers).
  void run(const std::function<void(const Instr&)>& fn);

  // Start and end of each of this worker's instructions in the last run (on CUDA from timing events,
  // which waits for the device).
  std::vector<InstrTime> timings();

 private:
  const Schedule& schedule_;
  Worker& worker_;
  Communicator* comm_;
  bool one_issuer_;
  std::vector<int> match_;                   // recv id -> send id
  std::vector<std::vector<int>> signal_to_;  // id -> workers to signal after it
  std::vector<std::vector<int>> wait_for_;   // id -> remote instructions to wait for (by signal)
  std::vector<InstrTime> times_;
  struct CudaTiming;
  std::shared_ptr<CudaTiming> cuda_timing_;
  class LaneRun;  // one run's state, shared by the lane threads (executor.cc)
};

// Signal messages use tags from here on (user tags must stay below).
constexpr int kSignalTagBase = 1 << 24;

}  // namespace parallel
}  // namespace tandem
