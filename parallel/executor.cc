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

const char* const kScheduleCaptureLimits =
    "the schedules of Pipe-BD and Cyclic DP are not captured as CUDA graphs: their executor orders each worker's "
    "two lanes from the host (a lane's thread waits on a condition variable for the other lane's instructions and "
    "on the host for its requests), the local communicator matches sends and receives on the host, each step "
    "reads losses back (.item()) and Pipe-BD's relay waits for its sends; a graph cannot hold those host decisions. "
    "NCCL's collectives can be captured on a GPU, but the simulated NCCL cannot, and capturing each worker's "
    "compute segments alone is not done yet";
namespace parallel {

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

void Executor::run(const std::function<void(const Instr&)>& fn) {
  const int me = worker_.rank;
  const bool cuda = worker_.device.is_cuda();
  prepare_cuda_thread(worker_.device);  // done already on a run_on_workers thread
  size_t n = schedule_.size();
  std::vector<std::atomic<bool>> done(n);
  for (auto& d : done) d = false;
  std::mutex mu;
  std::condition_variable cv;
  std::atomic<bool> failed{false};
  std::exception_ptr error;

  // Per-instruction completion events for cross-lane dependencies (on the CPU, where the host-side waits
  // order the lanes, they declare that order to the stream checker).
  std::vector<std::unique_ptr<Event>> lane_done(n);
  times_.clear();
  std::vector<InstrTime> local_times(n);
  if (cuda) {
    cuda_timing_ = std::make_shared<CudaTiming>();
    cuda_timing_->start.resize(n);
    cuda_timing_->end.resize(n);
    cuda_timing_->base.record(worker_.compute);
    cuda_timing_->base_host_s = host_time_s();
  }

  // Signals live where the communicator carries them: MPI moves host memory only (on a GPU worker an MPI
  // signal then orders host issue, not device completion).
  const Device signal_device = comm_ != nullptr && comm_->backend() == "mpi" ? Device::cpu() : worker_.device;
  Tensor signal;
  if (comm_ != nullptr) {
    // Filled on the compute stream, which the comm lane's fork below follows, whatever the caller's current one.
    StreamGuard on_compute(worker_.compute);
    signal = zeros({1}, TensorOptions(DType::F32).with_device(signal_device));
  }
  // Fork: the comm lane starts after what the caller queued on the compute stream so far (the signal's fill).
  StreamFork lanes(worker_.compute, {worker_.comm});

  // Issues `ids` (one lane's program, or both lanes merged in id order) from the calling thread.
  auto run_program = [&](const std::vector<int>& ids) {
    std::vector<Request> signals_sent;
    for (int id : ids) {
      if (failed) return;
      const Instr& ins = schedule_.at(id);
      const int lane = ins.lane;
      Stream stream = lane == kComputeLane ? worker_.compute : worker_.comm;
      StreamGuard sg(stream);
      std::optional<stream_check::Context> context;
      if (stream_check::enabled()) context.emplace(schedule_.describe(id));
      // Same-worker dependencies on the other lane: wait until issued (host), then order the streams.
      for (int d : ins.deps) {
        const Instr& dep = schedule_.at(d);
        if (dep.worker != me || dep.lane == lane) continue;
        {
          std::unique_lock<std::mutex> lock(mu);
          cv.wait(lock, [&] { return done[d].load() || failed.load(); });
        }
        if (failed) return;
        stream.wait(*lane_done[d]);
      }
      // Other workers' instructions not carried by a message: their signal.
      for (int d : wait_for_[id]) {
        Tensor buf = empty({1}, TensorOptions(DType::F32).with_device(signal_device));
        comm_->recv(buf, schedule_.at(d).worker, kSignalTagBase + d);
      }
      if (cuda) {
        cuda_timing_->start[id] = std::make_unique<Event>(true);
        cuda_timing_->start[id]->record(stream);
      } else {
        local_times[id].start_s = host_time_s();
      }
      fn(ins);
      if (cuda) {
        cuda_timing_->end[id] = std::make_unique<Event>(true);
        cuda_timing_->end[id]->record(stream);
      } else {
        local_times[id].end_s = host_time_s();
      }
      lane_done[id] = std::make_unique<Event>();
      lane_done[id]->record(stream);
      for (int w : signal_to_[id]) {
        Request r = comm_->isend(signal, w, kSignalTagBase + id);
        // Through a communicator that pairs in issue order, a signal completes in order like every other
        // message (an NCCL send holds its stream until received; in-order local groups model that).
        if (comm_->needs_one_issuer())
          r.wait();
        else
          signals_sent.push_back(std::move(r));
      }
      {
        std::lock_guard<std::mutex> lock(mu);
        done[id] = true;
      }
      cv.notify_all();
    }
    for (auto& r : signals_sent) r.wait();
  };

  bool error_by_peer = false;
  // Keeps the first error, or a lane's own error over the other lane's stop because of it.
  auto fail = [&](bool by_peer) {
    report_worker_failure();  // peers (and this worker's other lane) blocked in a communicator stop now
    std::lock_guard<std::mutex> lock(mu);
    if (!error || (error_by_peer && !by_peer)) {
      error = std::current_exception();
      error_by_peer = by_peer;
    }
    failed = true;
    cv.notify_all();
  };
  auto guarded = [&](const std::vector<int>& ids) {
    LaneScope lane;
    try {
      run_program(ids);
    } catch (const PeerWorkerFailed&) {
      fail(true);
    } catch (...) {
      fail(false);
    }
  };

  std::vector<int> compute_ids = schedule_.program(me, kComputeLane);
  std::vector<int> comm_ids = schedule_.program(me, kCommLane);
  if (one_issuer_) {
    std::vector<int> merged(compute_ids.size() + comm_ids.size());
    std::merge(compute_ids.begin(), compute_ids.end(), comm_ids.begin(), comm_ids.end(), merged.begin());
    compute_ids = std::move(merged);
    comm_ids.clear();
  }
  std::thread comm_thread;
  if (!comm_ids.empty()) {
    // The comm lane works as the compute lane's thread does (on a run_on_workers thread: as the worker's). It starts
    // while other workers' streams may already wait for this worker: it must make no handle
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
  if (error) std::rethrow_exception(error);
  // Join: the caller's later work on the compute stream comes after both lanes'.
  lanes.join();

  if (!cuda) {
    for (const Instr& i : schedule_.instrs())
      if (i.worker == me) times_.push_back({i.id, local_times[i.id].start_s, local_times[i.id].end_s});
  }
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
