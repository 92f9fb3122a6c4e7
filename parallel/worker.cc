// Worker specs ("cpu:4", "cuda:0-3", "cuda:0/4", "best:4") and running a function on one thread per worker.
#include "parallel/worker.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <exception>
#include <mutex>
#include <set>
#include <thread>

#include "parallel/green_context.h"
#include "parallel/worker_context.h"
#include "runtime/base/error.h"
#include "runtime/base/spec_reader.h"
#include "runtime/memory/cuda_thread.h"
#include "runtime/memory/stream_check.h"

namespace tandem {
namespace parallel {

std::string Worker::name() const {
  switch (kind) {
    case WorkerKind::CpuThread: return "cpu#" + std::to_string(rank);
    case WorkerKind::CudaDevice: return device.str();
    case WorkerKind::CudaPartition:
      return device.str() + "/" + std::to_string(partitions) + "#" + std::to_string(partition);
  }
  return "?";
}

namespace {

// One comma-separated item of a spec: N CPU threads, or GPUs first..last each split into `parts`.
struct SpecItem {
  bool cpu = false;
  int threads = 0;
  int first = 0, last = 0;
  int parts = 0;  // 0: whole GPUs (CudaDevice workers)
};

constexpr int kMaxCpuWorkers = 4096;
constexpr int kMaxGpuIndex = 1023;
constexpr int kMaxPartitions = 1024;

std::string trim(const std::string& s) {
  size_t b = s.find_first_not_of(" \t"), e = s.find_last_not_of(" \t");
  return b == std::string::npos ? std::string() : s.substr(b, e - b + 1);
}

SpecItem parse_item(const SpecReader& r, const std::string& text) {
  // "cpu" and "cuda" alone mean one worker, as in Device::parse.
  const std::string item = text == "cpu" ? "cpu:1" : text == "cuda" ? "cuda:0" : text;
  SpecItem it;
  if (item.rfind("cpu:", 0) == 0) {
    it.cpu = true;
    it.threads = static_cast<int>(r.integer("CPU threads", item.substr(4), 1, kMaxCpuWorkers));
    return it;
  }
  if (item.rfind("best:", 0) == 0) {
    const int n = static_cast<int>(r.integer("workers", item.substr(5), 1, kMaxPartitions));
    if (!cuda_available()) {
      it.cpu = true;
      it.threads = n;
    } else {
      it.parts = n;
    }
    return it;
  }
  if (item.rfind("cuda:", 0) != 0) r.fail("cannot parse '", item, "'");
  std::string rest = item.substr(5), range = rest;
  size_t slash = rest.find('/');
  if (slash != std::string::npos) {
    range = rest.substr(0, slash);
    it.parts = static_cast<int>(r.integer("partitions", rest.substr(slash + 1), 1, kMaxPartitions));
  }
  size_t dash = range.find('-');
  it.first = static_cast<int>(r.integer("GPU index", range.substr(0, dash), 0, kMaxGpuIndex));
  it.last = dash == std::string::npos
                ? it.first
                : static_cast<int>(r.integer("GPU index", range.substr(dash + 1), 0, kMaxGpuIndex));
  if (it.first > it.last) r.fail("empty GPU range in '", item, "' (", it.first, " > ", it.last, ")");
  return it;
}

thread_local RunState* tl_run = nullptr;

bool is_peer_stop(const std::exception_ptr& e) {
  try {
    std::rethrow_exception(e);
  } catch (const PeerWorkerFailed&) {
    return true;
  } catch (...) {
    return false;
  }
}

}  // namespace

// The run_on_workers call the current thread works for: set on its threads (and their helpers) only.
struct RunState {
  std::atomic<bool> failed{false};
};

namespace {

// The items of a spec, checked: GPUs named once, CPU and CUDA workers not mixed, every GPU present.
std::vector<SpecItem> parse_spec(const std::string& spec) {
  std::vector<SpecItem> items;
  const std::string s = trim(spec);
  TD_CHECK(!s.empty(), "empty worker spec (expected e.g. cpu:4, cuda:0-3, cuda:0/4 or best:4)");
  const SpecReader r("worker spec", spec, "cpu:N, cuda:I, cuda:I-J, cuda:I/P, best:N or a comma-separated list");
  for (const std::string& item : r.items(s, ',')) {
    if (trim(item).empty()) r.fail("empty item ", items.size() + 1);
    items.push_back(parse_item(r, trim(item)));
  }
  bool any_cpu = false, any_cuda = false;
  std::set<int> gpus;
  for (const SpecItem& it : items) {
    (it.cpu ? any_cpu : any_cuda) = true;
    for (int g = it.first; !it.cpu && g <= it.last; ++g)
      TD_CHECK(gpus.insert(g).second, "worker spec '", spec, "' names GPU ", g, " more than once");
  }
  TD_CHECK(!(any_cpu && any_cuda), "worker spec '", spec,
           "' mixes CPU and CUDA workers; a group's workers must all be CPU threads or all be GPUs");
  for (int g : gpus) check_device_available(Device::cuda(g));
  return items;
}

int item_workers(const SpecItem& it) { return it.cpu ? it.threads : (it.last - it.first + 1) * std::max(it.parts, 1); }

// Gives a built worker its rank and memory tracker, and names its streams for the stream checker.
Worker ranked(Worker w, int rank) {
  w.rank = rank;
  w.memory = std::make_shared<MemoryTracker>(w.name());
  stream_check::name_stream(w.compute, w.name() + " compute");
  stream_check::name_stream(w.comm, w.name() + " comm");
  return w;
}

Worker cpu_worker() {
  // Tags of their own, so that the order between a worker's lanes and workers is declared by events as on a
  // GPU, and checked under TANDEM_STREAM_CHECK.
  Worker w;
  w.compute = Stream::create(Device::cpu());
  w.comm = Stream::create(Device::cpu());
  return w;
}

Worker gpu_worker(Device dev) {
  Worker w;
  w.kind = WorkerKind::CudaDevice;
  w.device = dev;
  w.sm_count = device_sm_count(dev);
  w.compute = Stream::create(dev);
  w.comm = Stream::create(dev);
  return w;
}

Worker partition_worker(Device dev, int partitions, int partition, const SmPartition& part) {
  Worker w;
  w.kind = WorkerKind::CudaPartition;
  w.device = dev;
  w.partition = partition;
  w.partitions = partitions;
  w.sm_count = part.sm_count;
  w.green_context = part.green_context;
  w.compute = part.compute;
  w.comm = part.comm;
  return w;
}

}  // namespace

std::vector<Worker> make_workers(const std::string& spec) {
  std::vector<Worker> workers;
  auto add = [&](Worker w) { workers.push_back(ranked(std::move(w), static_cast<int>(workers.size()))); };
  for (const SpecItem& it : parse_spec(spec)) {
    if (it.cpu) {
      for (int i = 0; i < it.threads; ++i) add(cpu_worker());
      continue;
    }
    for (int g = it.first; g <= it.last; ++g) {
      const Device dev = Device::cuda(g);
      if (it.parts == 0) {
        add(gpu_worker(dev));
        continue;
      }
      std::vector<SmPartition> parts = make_sm_partitions(dev, it.parts);
      for (int p = 0; p < it.parts; ++p) add(partition_worker(dev, it.parts, p, parts[p]));
    }
  }
  return workers;
}

int count_workers(const std::string& spec) {
  int n = 0;
  for (const SpecItem& it : parse_spec(spec)) n += item_workers(it);
  return n;
}

Worker make_worker(const std::string& spec, int rank) {
  const std::vector<SpecItem> items = parse_spec(spec);
  int first = 0;  // the rank of the item's first worker
  for (const SpecItem& it : items) {
    const int n = item_workers(it);
    if (rank >= first && rank < first + n) {
      const int i = rank - first;
      if (it.cpu) return ranked(cpu_worker(), rank);
      if (it.parts == 0) return ranked(gpu_worker(Device::cuda(it.first + i)), rank);
      const Device dev = Device::cuda(it.first + i / it.parts);
      return ranked(partition_worker(dev, it.parts, i % it.parts, make_sm_partition(dev, it.parts, i % it.parts)),
                    rank);
    }
    first += n;
  }
  TD_THROW(ValueError, "worker spec '", spec, "' names ", first, " workers: it has no rank ", rank);
}

bool peer_worker_failed() { return tl_run != nullptr && tl_run->failed.load(); }

RunState* current_run_state() { return tl_run; }
RunStateGuard::RunStateGuard(RunState* state) : previous_(tl_run) { tl_run = state; }
RunStateGuard::~RunStateGuard() { tl_run = previous_; }
void report_worker_failure() {
  if (tl_run != nullptr) tl_run->failed.store(true);
}

void throw_peer_worker_failed(const std::string& where) {
  detail::raise<PeerWorkerFailed>(detail::concat(where, ": stopped because another worker failed"), "", __FILE__,
                                  __LINE__);
}

void run_on_workers(std::vector<Worker>& workers, const std::function<void(Worker&)>& fn) {
  RunState state;
  const size_t n = workers.size();
  std::vector<std::exception_ptr> errors(n);
  std::vector<std::thread> threads;
  threads.reserve(n);
  // Every thread is prepared before any starts its work: a thread that made its handles while a peer's stream
  // already waited for it would hang (runtime/memory/cuda_thread.h).
  std::mutex start_mu;
  std::condition_variable start_cv;
  size_t prepared = 0;
  bool unprepared = false;  // a thread failed before the start line (under start_mu): the others stop there
  auto wait_for_all_prepared = [&] {
    std::unique_lock<std::mutex> lock(start_mu);
    if (++prepared == n) start_cv.notify_all();
    start_cv.wait(lock, [&] { return prepared == n; });
  };
  for (size_t i = 0; i < n; ++i) {
    threads.emplace_back([&, i] {
      Worker& w = workers[i];
      bool arrived = false;
      auto arrive = [&] {
        if (!arrived) wait_for_all_prepared();
        arrived = true;
      };
      try {
        WorkerContextGuard context(WorkerContext::of(w, &state));
        prepare_cuda_thread(w.device);
        arrive();
        {
          std::lock_guard<std::mutex> lock(start_mu);
          if (unprepared) throw_peer_worker_failed(w.name());
        }
        fn(w);
        w.compute.synchronize();
        w.comm.synchronize();
      } catch (...) {
        errors[i] = std::current_exception();
        state.failed.store(true);
        if (!arrived) {
          std::lock_guard<std::mutex> lock(start_mu);
          unprepared = true;
        }
        arrive();
      }
    });
  }
  for (auto& t : threads) t.join();
  // The first failure by rank, skipping workers that only stopped because of it.
  std::exception_ptr first;
  for (size_t i = 0; i < n && !first; ++i)
    if (errors[i] && !is_peer_stop(errors[i])) first = errors[i];
  for (size_t i = 0; i < n && !first; ++i)
    if (errors[i]) first = errors[i];
  if (first) std::rethrow_exception(first);
}

}  // namespace parallel
}  // namespace tandem
