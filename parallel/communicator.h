// Communicator: point-to-point and collective operations over a group of workers.
// Backends: "local" (threads of one process; host copies or device copies ordered by events),
// "mpi" (CPU tensors across processes) and "nccl" (GPUs; bootstrapped through MPI or one process).
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace tandem {
namespace parallel {

struct Worker;

// Completion of an asynchronous operation. wait() returns once the operation's buffers may be reused
// (on CUDA: once the caller's stream is ordered after it; the host does not wait for the device).
class Request {
 public:
  Request() = default;
  explicit Request(std::function<void()> wait_fn) : wait_(std::move(wait_fn)) {}
  void wait() {
    if (wait_) {
      auto w = std::move(wait_);
      wait_ = nullptr;
      w();
    }
  }
  bool pending() const { return static_cast<bool>(wait_); }

 private:
  std::function<void()> wait_;
};

// Bytes this rank has sent and received, with the time of each transfer, for communication-over-time plots.
struct CommRecord {
  double time_s;      // host_time_s() when the operation was issued
  std::string op;     // "send", "recv", "all_reduce", ...
  int64_t bytes = 0;  // bytes this rank moved (sent + received) in the operation
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  virtual std::string backend() const = 0;
  // True when this backend's operations must all be issued from one host thread, in an order every rank
  // agrees on (NCCL: one handle that is not thread-safe, messages matched in issue order, one stream per
  // worker). Executors then issue all of a worker's lanes from one thread (see Executor).
  virtual bool needs_one_issuer() const { return false; }

  // Point-to-point. `t` is read until the returned request completes; recv fills `t` (same shape/dtype
  // as the matching send) on the calling worker's current stream.
  virtual Request isend(const Tensor& t, int dst, int tag = 0) = 0;
  virtual void recv(Tensor& t, int src, int tag = 0) = 0;
  void send(const Tensor& t, int dst, int tag = 0) { isend(t, dst, tag).wait(); }

  // Collectives (every rank of the group calls them in the same order). all_reduce sums in rank order
  // (deterministic, identical on every rank), then multiplies by `scale` (1/size() for a mean). The sum
  // accumulates in f32 for f16/bf16/f32, in f64 for f64 and in i64 for integers (which need scale 1);
  // the local, MPI and NCCL backends share this arithmetic, so their results are bitwise equal.
  virtual void all_reduce(Tensor& t, double scale = 1.0) = 0;
  virtual void broadcast(Tensor& t, int root) = 0;
  // out = concat of every rank's `in` along dim 0, in rank order.
  virtual void all_gather(const Tensor& in, Tensor& out) = 0;
  // out = this rank's slice (dim 0, size()/size() equal parts) of the rank-order sum of every `in`, times scale.
  virtual void reduce_scatter(const Tensor& in, Tensor& out, double scale = 1.0) = 0;
  virtual void barrier() = 0;

  // A communicator over a subset of this group's ranks (given in their order); every rank of the group
  // calls split with the same list, ranks outside it get nullptr.
  virtual std::shared_ptr<Communicator> split(const std::vector<int>& ranks) = 0;

  // Transfer log (empty unless recording is on).
  void set_recording(bool on) { recording_ = on; }
  std::vector<CommRecord> take_records();
  int64_t bytes_moved() const { return bytes_moved_.load(); }

 protected:
  void note(const char* op, int64_t bytes);  // thread-safe: a worker's lanes share its communicator

 private:
  std::atomic<bool> recording_{false};
  std::mutex records_mu_;
  std::vector<CommRecord> records_;
  std::atomic<int64_t> bytes_moved_{0};
};

// How the local backend pairs a recv with a send from the same rank.
enum class MessageMatching {
  ByTag,  // the oldest send with the recv's tag (as MPI does)
  // The oldest send, whatever its tag; a tag that differs from the recv's is a BackendError that stops the
  // group. This is NCCL's rule (it has no tags), and such communicators also ask executors for one issuing
  // thread as NCCL's do, so a CPU run checks that a schedule's messages pair correctly under NCCL.
  InIssueOrder,
};

// One communicator per worker for a group living in this process ("local" backend), rank i = workers[i].
std::vector<std::shared_ptr<Communicator>> make_local_group(const std::vector<Worker>& workers,
                                                            MessageMatching matching = MessageMatching::ByTag);

}  // namespace parallel
}  // namespace tandem
