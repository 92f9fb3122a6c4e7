// A small shared thread pool behind parallel_for.
#include "runtime/base/parallel_for.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

namespace tandem {

namespace {
int default_threads() {
  if (const char* v = std::getenv("TANDEM_NUM_THREADS")) {
    int n = std::atoi(v);
    if (n > 0) return n;
  }
  return std::max(1u, std::thread::hardware_concurrency());
}

thread_local int tl_threads = 0;  // 0: not set yet
thread_local bool tl_inside = false;

struct Job {
  std::function<void(int64_t, int64_t)> fn;
  std::atomic<int> remaining{0};
  std::mutex mu;
  std::condition_variable done;
  std::exception_ptr error;
};

struct Task {
  std::shared_ptr<Job> job;
  int64_t lo, hi;
};

void run_task(const Task& t) {
  tl_inside = true;
  try {
    t.job->fn(t.lo, t.hi);
  } catch (...) {
    std::lock_guard<std::mutex> lock(t.job->mu);
    if (!t.job->error) t.job->error = std::current_exception();
  }
  tl_inside = false;
  if (t.job->remaining.fetch_sub(1) == 1) {
    std::lock_guard<std::mutex> lock(t.job->mu);
    t.job->done.notify_all();
  }
}

class Pool {
 public:
  static Pool& get() {
    static Pool* p = new Pool(std::max(1, default_threads() - 1));  // never destroyed: threads detach at exit
    return *p;
  }
  void submit(std::vector<Task> tasks) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      for (auto& t : tasks) queue_.push_back(std::move(t));
    }
    cv_.notify_all();
  }
  // Runs queued tasks of `job` on the calling thread while waiting.
  bool try_run_one(const std::shared_ptr<Job>& job) {
    Task t;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = std::find_if(queue_.begin(), queue_.end(), [&](const Task& q) { return q.job == job; });
      if (it == queue_.end()) return false;
      t = std::move(*it);
      queue_.erase(it);
    }
    run_task(t);
    return true;
  }

 private:
  explicit Pool(int n) {
    for (int i = 0; i < n; ++i) std::thread([this] { loop(); }).detach();
  }
  void loop() {
    for (;;) {
      Task t;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !queue_.empty(); });
        t = std::move(queue_.front());
        queue_.pop_front();
      }
      run_task(t);
    }
  }
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Task> queue_;
};
}  // namespace

int intra_op_threads() {
  if (tl_threads == 0) tl_threads = default_threads();
  return tl_threads;
}

void set_intra_op_threads(int n) { tl_threads = std::max(1, n); }

void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn) {
  if (end <= begin) return;
  grain = std::max<int64_t>(grain, 1);
  int64_t n = end - begin;
  int64_t pieces = std::min<int64_t>(intra_op_threads(), n / grain);  // so every piece but the last is >= grain
  if (pieces <= 1 || tl_inside) {
    fn(begin, end);
    return;
  }
  auto job = std::make_shared<Job>();
  job->fn = fn;
  job->remaining = static_cast<int>(pieces);
  std::vector<Task> tasks;
  int64_t step = (n + pieces - 1) / pieces;
  for (int64_t p = 1; p < pieces; ++p) {
    int64_t lo = begin + p * step, hi = std::min(end, lo + step);
    if (lo >= hi) {
      job->remaining.fetch_sub(1);
      continue;
    }
    tasks.push_back({job, lo, hi});
  }
  Pool::get().submit(std::move(tasks));
  run_task({job, begin, std::min(end, begin + step)});
  while (job->remaining.load() > 0 && Pool::get().try_run_one(job)) {
  }
  {
    std::unique_lock<std::mutex> lock(job->mu);
    job->done.wait(lock, [&] { return job->remaining.load() == 0; });
  }
  if (job->error) std::rethrow_exception(job->error);
}

}  // namespace tandem
