// The schedule executor: lane threads, cross-lane events, cross-worker signals, and timings.
#include "parallel/executor.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <optional>
#include <thread>

#include "parallel/worker_context.h"
#include "runtime/base/error.h"
#include "runtime/memory/cuda_thread.h"
#include "runtime/memory/stream_check.h"
#include "runtime/memory/stream_fork.h"

namespace tandem {
namespace parallel {

const char* const kScheduleCaptureLimits =
    "Cyclic DP's schedules are not captured as CUDA graphs: its executor orders each worker's two lanes from the "
    "host and the local communicator matches sends and receives there, so a whole round cannot be one graph; and a "
    "micro-batch's forward and its backward are separate instructions with other work between them, so a forward "
    "captured alone would keep activations (for its backward) that outlive its graph, whose memory is freed inside "
    "it. (Pipe-BD's workers do replay their compute instructions from graphs: distill --cuda-graph)";

struct Executor::CudaTiming {
  Event base{true};
  double base_host_s = 0;
  std::vector<std::unique_ptr<Event>> start, end;  // per local instruction index
};

Executor::Executor(const Schedule& schedule, Worker& worker, Communicator* comm, bool one_issuer)
    : schedule_(schedule),
      worker_(worker),
      comm_(comm),
      one_issuer_(one_issuer || (comm != nullptr && comm->needs_one_issuer())) {
  size_t n = schedule.size();
  match_ = schedule.matching_sends();
  signal_to_.resize(n);
  wait_for_.resize(n);
  for (const Instr& i : schedule.instrs())
    for (int d : i.deps) {
      const Instr& dep = schedule.at(d);
      if (dep.worker == i.worker) continue;
      if (i.kind == OpKind::Recv && match_[i.id] == d) continue;  // carried by the message itself
      signal_to_[d].push_back(i.worker);
      wait_for_[i.id].push_back(d);
    }
  if (one_issuer_)
    for (const Instr& i : schedule.instrs()) {
      if (i.worker != worker.rank) continue;
      for (int d : i.deps)
        TD_CHECK(schedule.at(d).worker != i.worker || d < i.id, "one issuing thread runs worker ", i.worker,
                 "'s instructions in id order, but ", schedule.describe(i.id), " depends on the later ",
                 schedule.describe(d));
    }
}

// One run of this worker's lanes: what the lane threads share (which instructions are done, the first error,
// the cross-lane events, the host timings, the signal message) and what a lane does for each instruction.
class Executor::LaneRun {
 public:
  LaneRun(Executor& ex, const std::function<void(const Instr&)>& fn)
      : ex_(ex),
        fn_(fn),
        me_(ex.worker_.rank),
        cuda_(ex.worker_.device.is_cuda()),
        done_(ex.schedule_.size()),
        lane_done_(ex.schedule_.size()),
        local_times_(ex.schedule_.size()),
        // Signals live where the communicator carries them: MPI moves host memory only (on a GPU worker an MPI
        // signal then orders host issue, not device completion).
        signal_device_(ex.comm_ != nullptr && ex.comm_->backend() == "mpi" ? Device::cpu() : ex.worker_.device) {
    for (auto& d : done_) d = false;
    const size_t n = ex.schedule_.size();
    if (cuda_) {
      ex.cuda_timing_ = std::make_shared<CudaTiming>();
      ex.cuda_timing_->start.resize(n);
      ex.cuda_timing_->end.resize(n);
      ex.cuda_timing_->base.record(ex.worker_.compute);
      ex.cuda_timing_->base_host_s = host_time_s();
    }
    if (ex.comm_ != nullptr) {
      // Filled on the compute stream, which the comm lane's fork follows, whatever the caller's current one.
      StreamGuard on_compute(ex.worker_.compute);
      signal_ = zeros({1}, TensorOptions(DType::F32).with_device(signal_device_));
    }
  }

  // Issues both lanes' programs, the comm lane from a thread of its own (or both from this one, merged in id
  // order, when one thread issues); rethrows the first error.
  void run_lanes() {
    std::vector<int> compute_ids = ex_.schedule_.program(me_, kComputeLane);
    std::vector<int> comm_ids = ex_.schedule_.program(me_, kCommLane);
    if (ex_.one_issuer_) {
      std::vector<int> merged(compute_ids.size() + comm_ids.size());
      std::merge(compute_ids.begin(), compute_ids.end(), comm_ids.begin(), comm_ids.end(), merged.begin());
      compute_ids = std::move(merged);
      comm_ids.clear();
    }
    std::thread comm_thread;
    if (!comm_ids.empty()) {
      // The comm lane works as the compute lane's thread does (on a run_on_workers thread: as the worker's). It
      // starts while other workers' streams may already wait for this worker: it must make no handle
      // (runtime/memory/cuda_thread.h). Its instructions (messages, collectives, updates) launch only Tandem's
      // kernels, which the worker's setup loaded on the device; a cuBLAS or cuDNN call here would make a handle
      // mid-run, which the stream checker's mode refuses (kernels/thread_handles.h).
      comm_thread = std::thread([&, context = WorkerContext::capture()] {
        try {
          WorkerContextGuard guard(context);
          guarded(comm_ids);
        } catch (...) {  // applying the context failed (guarded catches the rest)
          fail(false);
        }
      });
    }
    guarded(compute_ids);
    if (comm_thread.joinable()) comm_thread.join();
    if (error_) std::rethrow_exception(error_);
  }

  // The host clock's start and end of this worker's instructions (CPU workers).
  std::vector<InstrTime> host_times() const {
    std::vector<InstrTime> out;
    for (const Instr& i : ex_.schedule_.instrs())
      if (i.worker == me_) out.push_back({i.id, local_times_[i.id].start_s, local_times_[i.id].end_s});
    return out;
  }

 private:
  // A lane's program, stopping at a failure (its own or the other lane's).
  void guarded(const std::vector<int>& ids) {
    LaneScope lane;
    try {
      issue(ids);
    } catch (const PeerWorkerFailed&) {
      fail(true);
    } catch (...) {
      fail(false);
    }
  }

  // Keeps the first error, or a lane's own error over the other lane's stop because of it.
  void fail(bool by_peer) {
    report_worker_failure();  // peers (and this worker's other lane) blocked in a communicator stop now
    std::lock_guard<std::mutex> lock(mu_);
    if (!error_ || (error_by_peer_ && !by_peer)) {
      error_ = std::current_exception();
      error_by_peer_ = by_peer;
    }
    failed_ = true;
    cv_.notify_all();
  }

  // Issues `ids` (one lane's program, or both lanes merged in id order) from the calling thread.
  void issue(const std::vector<int>& ids) {
    std::vector<Request> signals_sent;
    for (int id : ids) {
      if (failed_) return;
      const Instr& ins = ex_.schedule_.at(id);
      Stream stream = ins.lane == kComputeLane ? ex_.worker_.compute : ex_.worker_.comm;
      StreamGuard sg(stream);
      std::optional<stream_check::Context> context;
      if (stream_check::enabled()) context.emplace(ex_.schedule_.describe(id));
      if (!await_other_lane(ins, stream)) return;
      // Other workers' instructions not carried by a message: their signal.
      for (int d : ex_.wait_for_[id]) {
        Tensor buf = empty({1}, TensorOptions(DType::F32).with_device(signal_device_));
        ex_.comm_->recv(buf, ex_.schedule_.at(d).worker, kSignalTagBase + d);
      }
      stamp(id, stream, true);
      fn_(ins);
      stamp(id, stream, false);
      lane_done_[id] = std::make_unique<Event>();
      lane_done_[id]->record(stream);
      signal_peers(id, signals_sent);
      {
        std::lock_guard<std::mutex> lock(mu_);
        done_[id] = true;
      }
      cv_.notify_all();
    }
    for (auto& r : signals_sent) r.wait();
  }

  // Same-worker dependencies on the other lane: waits until they are issued (host), then orders the streams.
  // False when a failure stopped the wait.
  bool await_other_lane(const Instr& ins, Stream& stream) {
    for (int d : ins.deps) {
      const Instr& dep = ex_.schedule_.at(d);
      if (dep.worker != me_ || dep.lane == ins.lane) continue;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return done_[d].load() || failed_.load(); });
      }
      if (failed_) return false;
      stream.wait(*lane_done_[d]);
    }
    return true;
  }

  // The start or end of instruction `id`: a timing event on its stream (CUDA), else the host clock.
  void stamp(int id, const Stream& stream, bool start) {
    if (cuda_) {
      std::vector<std::unique_ptr<Event>>& events = start ? ex_.cuda_timing_->start : ex_.cuda_timing_->end;
      events[id] = std::make_unique<Event>(true);
      events[id]->record(stream);
    } else {
      (start ? local_times_[id].start_s : local_times_[id].end_s) = host_time_s();
    }
  }

  // The signal to each worker waiting for instruction `id`.
  void signal_peers(int id, std::vector<Request>& signals_sent) {
    for (int w : ex_.signal_to_[id]) {
      Request r = ex_.comm_->isend(signal_, w, kSignalTagBase + id);
      // Through a communicator that pairs in issue order, a signal completes in order like every other
      // message (an NCCL send holds its stream until received; in-order local groups model that).
      if (ex_.comm_->needs_one_issuer())
        r.wait();
      else
        signals_sent.push_back(std::move(r));
    }
  }

  Executor& ex_;
  const std::function<void(const Instr&)>& fn_;
  const int me_;
  const bool cuda_;
  std::vector<std::atomic<bool>> done_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::atomic<bool> failed_{false};
  std::exception_ptr error_;
  bool error_by_peer_ = false;
  // Per-instruction completion events for cross-lane dependencies (on the CPU, where the host-side waits
  // order the lanes, they declare that order to the stream checker).
  std::vector<std::unique_ptr<Event>> lane_done_;
  std::vector<InstrTime> local_times_;
  const Device signal_device_;
  Tensor signal_;
};

void Executor::run(const std::function<void(const Instr&)>& fn) {
  prepare_cuda_thread(worker_.device);  // done already on a run_on_workers thread
  times_.clear();
  LaneRun lanes_run(*this, fn);
  // Fork: the comm lane starts after what the caller queued on the compute stream so far (the signal's fill).
  StreamFork lanes(worker_.compute, {worker_.comm});
  lanes_run.run_lanes();
  // Join: the caller's later work on the compute stream comes after both lanes'.
  lanes.join();
  if (!worker_.device.is_cuda()) times_ = lanes_run.host_times();
}

std::vector<InstrTime> Executor::timings() {
  if (!worker_.device.is_cuda() || !cuda_timing_) return times_;
  if (times_.empty()) {
    auto& t = *cuda_timing_;
    for (const Instr& i : schedule_.instrs()) {
      if (i.worker != worker_.rank || !t.start[i.id] || !t.end[i.id]) continue;
      t.end[i.id]->synchronize();
      double s = t.base_host_s + t.base.elapsed_ms(*t.start[i.id]) * 1e-3;
      double e = t.base_host_s + t.base.elapsed_ms(*t.end[i.id]) * 1e-3;
      times_.push_back({i.id, s, e});
    }
  }
  return times_;
}

}  // namespace parallel
}  // namespace tandem
