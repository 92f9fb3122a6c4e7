// The local backend: ranks are threads of this process that meet in shared mailboxes and rounds. CPU
// tensors are copied by the host; CUDA tensors by async copies ordered with events, never host syncs.
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <map>
#include <mutex>
#include <tuple>

#include "parallel/communicator.h"
#include "parallel/local_comm.h"
#include "parallel/worker.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/error.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/stream.h"
#include "runtime/memory/stream_check.h"
#include "runtime/tensor/autograd.h"

namespace tandem {
namespace parallel {

// ---- pieces shared with the other backends ----
namespace detail {

namespace {
template <typename T>
void sum_on_host(const std::vector<const void*>& srcs, void* dst, int64_t count, double scale) {
  using Tr = SumTraits<T>;
  using Acc = typename Tr::Acc;
  constexpr int64_t kBlock = 1024;  // the accumulators of one block stay in L1 while every rank is added
  Acc acc[kBlock];
  T* out = static_cast<T*>(dst);
  for (int64_t lo = 0; lo < count; lo += kBlock) {
    const int64_t len = std::min(kBlock, count - lo);
    const T* first = static_cast<const T*>(srcs[0]) + lo;
    for (int64_t j = 0; j < len; ++j) acc[j] = Tr::load(first[j]);
    for (size_t s = 1; s < srcs.size(); ++s) {
      const T* src = static_cast<const T*>(srcs[s]) + lo;
      for (int64_t j = 0; j < len; ++j) acc[j] += Tr::load(src[j]);
    }
    if (scale != 1.0)
      for (int64_t j = 0; j < len; ++j) acc[j] = apply_scale(acc[j], scale);
    for (int64_t j = 0; j < len; ++j) out[lo + j] = Tr::store(acc[j]);
  }
}
}  // namespace

void rank_order_sum(const std::vector<const void*>& srcs, void* dst, int64_t count, DType dtype, double scale,
                    const Stream& stream, const char* op) {
  TD_ASSERT(!srcs.empty(), "rank_order_sum without inputs");
  if (count == 0) return;
  if (stream_check::enabled()) {
    const size_t bytes = static_cast<size_t>(count) * dtype_size(dtype);
    std::vector<stream_check::Access> accesses;
    for (const void* src : srcs) accesses.push_back(stream_check::reads(src, bytes));
    accesses.push_back(stream_check::writes(dst, bytes));
    stream_check::on_op(op, stream, accesses.data(), accesses.size());
  }
  if (stream.device().is_cuda()) {
    rank_order_sum_cuda(srcs.data(), static_cast<int>(srcs.size()), dst, count, dtype, scale, stream.cuda());
    return;
  }
  switch (dtype) {
    case DType::F32: sum_on_host<float>(srcs, dst, count, scale); break;
    case DType::F64: sum_on_host<double>(srcs, dst, count, scale); break;
    case DType::F16: sum_on_host<F16Bits>(srcs, dst, count, scale); break;
    case DType::BF16: sum_on_host<BF16Bits>(srcs, dst, count, scale); break;
    case DType::I32: sum_on_host<int32_t>(srcs, dst, count, scale); break;
    case DType::I64: sum_on_host<int64_t>(srcs, dst, count, scale); break;
    case DType::U8: sum_on_host<uint8_t>(srcs, dst, count, scale); break;
  }
}

void check_sum_args(DType dtype, double scale, const char* op) {
  TD_CHECK(is_floating(dtype) || scale == 1.0, op, " of ", dtype_name(dtype),
           " tensors sums exactly and takes no scale (got ", scale, "); convert to a floating dtype to scale");
}

void check_all_gather_args(const Tensor& in, const Tensor& out, int size) {
  TD_CHECK(in.defined() && out.defined(), "all_gather of an undefined tensor");
  TD_CHECK_SHAPE(in.dim() >= 1, "all_gather needs tensors with at least one dim, got ", describe(in));
  Shape want = in.shape();
  want[0] *= size;
  TD_CHECK_SHAPE(out.shape() == want && out.dtype() == in.dtype(), "all_gather of ", describe(in), " over ", size,
                 " ranks needs out of shape ", shape_str(want), " ", dtype_name(in.dtype()), ", got ", describe(out));
  TD_CHECK_DEVICE(out.device() == in.device(), "all_gather: in is on ", in.device(), " but out on ", out.device());
}

void check_reduce_scatter_args(const Tensor& in, const Tensor& out, int size, double scale) {
  TD_CHECK(in.defined() && out.defined(), "reduce_scatter of an undefined tensor");
  check_sum_args(in.dtype(), scale, "reduce_scatter");
  TD_CHECK_SHAPE(in.dim() >= 1 && in.size(0) % size == 0, "reduce_scatter over ", size,
                 " ranks needs a first dim divisible by ", size, ", got ", describe(in));
  Shape want = in.shape();
  want[0] /= size;
  TD_CHECK_SHAPE(out.shape() == want && out.dtype() == in.dtype(), "reduce_scatter of ", describe(in), " over ", size,
                 " ranks needs out of shape ", shape_str(want), " ", dtype_name(in.dtype()), ", got ", describe(out));
  TD_CHECK_DEVICE(out.device() == in.device(), "reduce_scatter: in is on ", in.device(), " but out on ", out.device());
}

void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, const Stream& stream,
                const char* op) {
  if (bytes == 0 || dst == src) return;
  TD_CHECK_DEVICE(dst_device.is_cpu() == src_device.is_cpu(), "cannot copy between ", src_device, " and ", dst_device,
                  " in a communicator: both ends must be on the CPU or both on CUDA");
  if (stream_check::enabled())
    stream_check::on_op(op, stream, {stream_check::reads(src, bytes), stream_check::writes(dst, bytes)});
  if (dst_device.is_cpu()) {
    std::memcpy(dst, src, bytes);
  } else if (dst_device == src_device) {
    TD_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToDevice, stream.cuda()));
  } else {
    TD_CUDA_CHECK(cudaMemcpyPeerAsync(dst, dst_device.index, src, src_device.index, bytes, stream.cuda()));
  }
}

int64_t all_reduce_bytes(int64_t count, size_t element_size, int rank, int size) {
  const int64_t mine = chunk_begin(count, rank + 1, size) - chunk_begin(count, rank, size);
  // Reduce-scatter: receive my chunk from every peer, send each peer its chunk; all-gather: the reverse.
  return 2 * ((size - 1) * mine + (count - mine)) * static_cast<int64_t>(element_size);
}

void check_peer(int peer, int size, const char* what) {
  TD_CHECK_INDEX(peer >= 0 && peer < size, what, " rank ", peer, " is out of range for a group of ", size, " ranks");
}

void check_tag(int tag) { TD_CHECK(tag >= 0, "message tags must be >= 0, got ", tag); }

std::string describe(const Tensor& t) {
  return shape_str(t.shape()) + " " + dtype_name(t.dtype()) + " on " + t.device().str();
}

}  // namespace detail

namespace {

using detail::check_all_gather_args;
using detail::check_reduce_scatter_args;
using detail::chunk_begin;
using detail::copy_bytes;
using detail::describe;

// How often a blocked rank looks whether a peer worker failed (waits are woken by notify otherwise).
constexpr auto kAbortPoll = std::chrono::milliseconds(20);

// What a rank hands to the others in a round: a tensor and the event after which it may be read.
struct Deposit {
  Tensor tensor;
  std::shared_ptr<Event> event;
};

enum class PostState { Pending, Done, Failed };
enum class FailKind { Shape, DType, Device, Backend };

// An isend waiting in a mailbox for its recv.
struct Post {
  Deposit data;
  int tag = 0;
  PostState state = PostState::Pending;
  std::shared_ptr<Event> done;  // recorded by the receiver after its copy
  FailKind fail = FailKind::Backend;
  std::string error;
};

[[noreturn]] void raise_failure(FailKind kind, const std::string& msg) {
  switch (kind) {
    case FailKind::Shape: TD_THROW(ShapeError, msg);
    case FailKind::DType: TD_THROW(DTypeError, msg);
    case FailKind::Device: TD_THROW(DeviceError, msg);
    case FailKind::Backend: break;
  }
  TD_THROW(BackendError, msg);
}

// An event recorded now on the current stream of `device`. On the CPU, where the host-side rendezvous already
// orders the ranks, events only declare that order to the stream checker.
std::shared_ptr<Event> mark(Device device) {
  auto e = std::make_shared<Event>();
  e->record(current_stream(device));
  return e;
}

void wait_on(const std::shared_ptr<Event>& e, const Stream& stream) {
  if (e) stream.wait(*e);
}

const char* bytes_of(const Tensor& t, int64_t element) {
  return static_cast<const char*>(t.raw_data()) + element * static_cast<int64_t>(dtype_size(t.dtype()));
}
char* bytes_of(Tensor& t, int64_t element) {
  return static_cast<char*>(t.raw_data()) + element * static_cast<int64_t>(dtype_size(t.dtype()));
}

// State shared by the ranks of one group.
class LocalGroup {
 public:
  LocalGroup(int size, MessageMatching matching) : size_(size), matching_(matching) {}
  int size() const { return size_; }
  MessageMatching matching() const { return matching_; }

  // Blocks until ready() holds; throws when the group is aborted or another worker of the run failed.
  template <typename Pred>
  void wait(std::unique_lock<std::mutex>& lock, Pred ready, const std::string& where) {
    while (!ready()) {
      if (aborted_) throw_peer_worker_failed(where + " (" + abort_reason_ + ")");
      if (peer_worker_failed()) {
        abort_locked("a worker failed");
        throw_peer_worker_failed(where);
      }
      cv_.wait_for(lock, kAbortPoll);
    }
  }

  void abort_locked(const std::string& why) {
    if (!aborted_) abort_reason_ = why;
    aborted_ = true;
    cv_.notify_all();
  }

  // Round `seq` of the collectives: every rank deposits, then receives all deposits (index = rank).
  std::vector<Deposit> exchange(int rank, uint64_t seq, Deposit mine, const std::string& where) {
    std::unique_lock<std::mutex> lock(mu_);
    Round& r = rounds_[seq];
    if (r.items.empty()) r.items.resize(size_);
    r.items[rank] = std::move(mine);
    if (++r.arrived == size_) cv_.notify_all();
    wait(
        lock, [&] { return r.arrived == size_; }, where);
    std::vector<Deposit> all = r.items;
    if (++r.taken == size_) rounds_.erase(seq);
    return all;
  }

  void post(int src, int dst, int tag, std::shared_ptr<Post> p) {
    std::lock_guard<std::mutex> lock(mu_);
    p->tag = tag;
    mail_[mailbox(src, dst, tag)].push_back(std::move(p));
    cv_.notify_all();
  }

  std::shared_ptr<Post> take(int src, int dst, int tag, const std::string& where) {
    std::unique_lock<std::mutex> lock(mu_);
    auto key = mailbox(src, dst, tag);
    wait(
        lock,
        [&] {
          auto it = mail_.find(key);
          return it != mail_.end() && !it->second.empty();
        },
        where);
    auto it = mail_.find(key);
    std::shared_ptr<Post> p = std::move(it->second.front());
    it->second.pop_front();
    if (it->second.empty()) mail_.erase(it);
    if (p->tag != tag) {
      const std::string msg = where + ": rank " + std::to_string(src) + "'s next message to rank " +
                              std::to_string(dst) + " has tag " + std::to_string(p->tag) +
                              ", so messages would pair in another order than the tags say (NCCL pairs them in "
                              "issue order)";
      abort_locked(msg);
      TD_THROW(BackendError, msg);
    }
    return p;
  }

  void settle(Post& p, PostState state, std::shared_ptr<Event> done, FailKind kind = FailKind::Backend,
              std::string error = "") {
    std::lock_guard<std::mutex> lock(mu_);
    p.done = std::move(done);
    p.fail = kind;
    p.error = std::move(error);
    p.state = state;
    cv_.notify_all();
  }

  void await(const Post& p, const std::string& where) {
    std::unique_lock<std::mutex> lock(mu_);
    wait(
        lock, [&] { return p.state != PostState::Pending; }, where);
  }

  // The subgroup made by split round `seq` (created by the first member to arrive).
  std::shared_ptr<LocalGroup> subgroup(uint64_t seq, int members) {
    std::lock_guard<std::mutex> lock(mu_);
    Split& s = splits_[seq];
    if (!s.group) s.group = std::make_shared<LocalGroup>(members, matching_);
    std::shared_ptr<LocalGroup> g = s.group;
    if (++s.taken == members) splits_.erase(seq);
    return g;
  }

 private:
  struct Round {
    std::vector<Deposit> items;
    int arrived = 0;
    int taken = 0;
  };
  struct Split {
    std::shared_ptr<LocalGroup> group;
    int taken = 0;
  };

  // By tag: one mailbox per (src, dst, tag). In issue order: one per (src, dst), tags checked on receipt.
  std::tuple<int, int, int> mailbox(int src, int dst, int tag) const {
    return std::make_tuple(src, dst, matching_ == MessageMatching::ByTag ? tag : 0);
  }

  const int size_;
  const MessageMatching matching_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool aborted_ = false;
  std::string abort_reason_;
  std::map<uint64_t, Round> rounds_;
  std::map<std::tuple<int, int, int>, std::deque<std::shared_ptr<Post>>> mail_;
  std::map<uint64_t, Split> splits_;
};

class LocalCommunicator : public Communicator {
 public:
  LocalCommunicator(std::shared_ptr<LocalGroup> group, int rank) : group_(std::move(group)), rank_(rank) {}

  int rank() const override { return rank_; }
  int size() const override { return group_->size(); }
  std::string backend() const override { return "local"; }
  bool needs_one_issuer() const override { return group_->matching() == MessageMatching::InIssueOrder; }

  Request isend(const Tensor& t, int dst, int tag) override {
    TD_CHECK(t.defined(), "isend of an undefined tensor");
    detail::check_peer(dst, size(), "isend to");
    detail::check_tag(tag);
    autograd::NoGradGuard no_grad;
    auto post = std::make_shared<Post>();
    post->data.tensor = t.contiguous();
    post->data.event = mark(t.device());
    note("send", static_cast<int64_t>(t.nbytes()));
    group_->post(rank_, dst, tag, post);
    std::string where = "send from rank " + std::to_string(rank_) + " to rank " + std::to_string(dst) + " (tag " +
                        std::to_string(tag) + ")";
    std::shared_ptr<LocalGroup> group = group_;
    return Request([group, post, where] {
      group->await(*post, where);
      if (post->state == PostState::Failed) raise_failure(post->fail, where + ": " + post->error);
      // Later writes to the buffer on this stream wait for the receiver's copy.
      Stream s = current_stream(post->data.tensor.device());
      wait_on(post->done, s);
      post->data.tensor.storage().record_stream(s);
    });
  }

  void recv(Tensor& t, int src, int tag) override {
    TD_CHECK(t.defined(), "recv into an undefined tensor");
    detail::check_peer(src, size(), "recv from");
    detail::check_tag(tag);
    autograd::NoGradGuard no_grad;
    std::string where = "recv on rank " + std::to_string(rank_) + " from rank " + std::to_string(src) + " (tag " +
                        std::to_string(tag) + ")";
    std::shared_ptr<Post> post = group_->take(src, rank_, tag, where);
    const Tensor& in = post->data.tensor;
    FailKind kind = FailKind::Backend;
    std::string error;
    if (in.dtype() != t.dtype() || in.shape() != t.shape() || in.device().is_cpu() != t.device().is_cpu()) {
      kind = in.dtype() != t.dtype() ? FailKind::DType : in.shape() != t.shape() ? FailKind::Shape : FailKind::Device;
      error = "the sender sent " + describe(in) + " but the receiver expects " + describe(t);
    }
    std::shared_ptr<Event> done;
    if (error.empty()) {
      try {
        done = copy_in(in, post->data.event, t);
      } catch (const std::exception& e) {
        error = e.what();
      }
    }
    group_->settle(*post, error.empty() ? PostState::Done : PostState::Failed, done, kind, error);
    if (!error.empty()) raise_failure(kind, where + ": " + error);
    note("recv", static_cast<int64_t>(t.nbytes()));
  }

  void all_reduce(Tensor& t, double scale) override {
    TD_CHECK(t.defined(), "all_reduce of an undefined tensor");
    detail::check_sum_args(t.dtype(), scale, "all_reduce");
    autograd::NoGradGuard no_grad;
    Tensor work = t.contiguous();
    const Device dev = work.device();
    const Stream stream = current_stream(dev);
    std::vector<Deposit> in = exchange(Deposit{work, mark(dev)}, "all_reduce");
    check_same(in, "all_reduce");
    const int n = size();
    const int64_t count = work.numel();
    const size_t elem = dtype_size(work.dtype());
    const int64_t lo = chunk_begin(count, rank_, n), hi = chunk_begin(count, rank_ + 1, n);
    sum_slices(in, lo, hi - lo, scale, bytes_of(work, lo), "all_reduce");
    std::vector<Deposit> reduced = exchange(Deposit{Tensor(), mark(dev)}, "all_reduce");
    for (int s = 0; s < n; ++s) {
      const int64_t b = chunk_begin(count, s, n), e = chunk_begin(count, s + 1, n);
      if (s == rank_ || e == b) continue;
      wait_on(reduced[s].event, stream);
      copy_bytes(bytes_of(work, b), dev, bytes_of(in[s].tensor, b), in[s].tensor.device(), (e - b) * elem, stream,
                 "all_reduce");
    }
    finish(in, t, work, "all_reduce");
    note("all_reduce", detail::all_reduce_bytes(count, elem, rank_, n));
  }

  void broadcast(Tensor& t, int root) override {
    TD_CHECK(t.defined(), "broadcast of an undefined tensor");
    detail::check_peer(root, size(), "broadcast from");
    autograd::NoGradGuard no_grad;
    Tensor work = t.contiguous();
    const Device dev = work.device();
    std::vector<Deposit> in = exchange(Deposit{work, mark(dev)}, "broadcast");
    check_same(in, "broadcast");
    if (rank_ != root) {
      const Stream stream = current_stream(dev);
      wait_on(in[root].event, stream);
      copy_bytes(work.raw_data(), dev, in[root].tensor.raw_data(), in[root].tensor.device(), work.nbytes(), stream,
                 "broadcast");
    }
    finish(in, t, work, "broadcast");
    const int64_t bytes = static_cast<int64_t>(work.nbytes());
    note("broadcast", rank_ == root ? bytes * (size() - 1) : bytes);
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    check_all_gather_args(in, out, size());
    autograd::NoGradGuard no_grad;
    Tensor src = in.contiguous(), work = out.contiguous();
    const Device dev = work.device();
    const Stream stream = current_stream(dev);
    std::vector<Deposit> all = exchange(Deposit{src, mark(dev)}, "all_gather");
    check_same(all, "all_gather");
    for (int s = 0; s < size(); ++s) {
      wait_on(all[s].event, stream);
      copy_bytes(bytes_of(work, s * src.numel()), dev, all[s].tensor.raw_data(), all[s].tensor.device(), src.nbytes(),
                 stream, "all_gather");
    }
    finish(all, out, work, "all_gather");
    note("all_gather", 2 * static_cast<int64_t>(src.nbytes()) * (size() - 1));
  }

  void reduce_scatter(const Tensor& in, Tensor& out, double scale) override {
    check_reduce_scatter_args(in, out, size(), scale);
    autograd::NoGradGuard no_grad;
    Tensor src = in.contiguous(), work = out.contiguous();
    std::vector<Deposit> all = exchange(Deposit{src, mark(src.device())}, "reduce_scatter");
    check_same(all, "reduce_scatter");
    sum_slices(all, rank_ * work.numel(), work.numel(), scale, work.raw_data(), "reduce_scatter");
    finish(all, out, work, "reduce_scatter");
    note("reduce_scatter", 2 * static_cast<int64_t>(work.nbytes()) * (size() - 1));
  }

  void barrier() override {
    const Device dev = current_device();
    std::vector<Deposit> all = exchange(Deposit{Tensor(), mark(dev)}, "barrier");
    const Stream stream = current_stream(dev);
    for (const Deposit& d : all) wait_on(d.event, stream);
    note("barrier", 0);
  }

  std::shared_ptr<Communicator> split(const std::vector<int>& ranks) override {
    int me = -1;
    std::vector<bool> seen(size(), false);
    TD_CHECK(!ranks.empty(), "split needs at least one rank");
    for (size_t i = 0; i < ranks.size(); ++i) {
      detail::check_peer(ranks[i], size(), "split with");
      TD_CHECK(!seen[ranks[i]], "split lists rank ", ranks[i], " twice");
      seen[ranks[i]] = true;
      if (ranks[i] == rank_) me = static_cast<int>(i);
    }
    std::vector<int64_t> mine(ranks.begin(), ranks.end());
    const uint64_t seq = seq_;
    std::vector<Deposit> all =
        exchange(Deposit{from_vector(mine, {static_cast<int64_t>(mine.size())}, Device::cpu()), nullptr}, "split");
    for (int s = 0; s < size(); ++s)
      TD_CHECK(all[s].tensor.to_vector<int64_t>() == mine, "split: rank ", s, " passed ranks ",
               shape_str(all[s].tensor.to_vector<int64_t>()), " but rank ", rank_, " passed ", shape_str(mine),
               "; every rank must pass the same list");
    if (me < 0) return nullptr;
    return std::make_shared<LocalCommunicator>(group_->subgroup(seq, static_cast<int>(ranks.size())), me);
  }

 private:
  std::vector<Deposit> exchange(Deposit mine, const char* op) {
    return group_->exchange(rank_, seq_++, std::move(mine), std::string(op) + " on rank " + std::to_string(rank_));
  }

  // Every rank's deposit must match rank 0's (the same error is raised on every rank).
  void check_same(const std::vector<Deposit>& all, const char* op) const {
    const Tensor& ref = all[0].tensor;
    for (int s = 1; s < size(); ++s) {
      const Tensor& t = all[s].tensor;
      TD_CHECK_DEVICE(t.device().is_cpu() == ref.device().is_cpu(), op, ": rank ", s, " passed ", describe(t),
                      " but rank 0 passed ", describe(ref), "; all ranks must be on the CPU or all on CUDA");
      TD_CHECK_DTYPE(t.dtype() == ref.dtype(), op, ": rank ", s, " passed ", describe(t), " but rank 0 passed ",
                     describe(ref));
      TD_CHECK_SHAPE(t.shape() == ref.shape(), op, ": rank ", s, " passed ", describe(t), " but rank 0 passed ",
                     describe(ref));
    }
    if (ref.device().is_cuda())
      TD_CHECK(size() <= detail::kMaxSumInputs, op, " on CUDA supports up to ", detail::kMaxSumInputs,
               " ranks, this group has ", size());
  }

  // dst = scale * sum over ranks (in order) of elements [first, first + count) of every deposit. Peers on
  // other GPUs are first copied into a staging buffer on this device.
  void sum_slices(const std::vector<Deposit>& all, int64_t first, int64_t count, double scale, void* dst,
                  const char* op) {
    if (count == 0) return;
    const Tensor& mine = all[rank_].tensor;
    const Device dev = mine.device();
    const Stream stream = current_stream(dev);
    const size_t bytes = static_cast<size_t>(count) * dtype_size(mine.dtype());
    std::vector<const void*> srcs(size());
    Tensor staging;
    for (int s = 0; s < size(); ++s) {
      const Tensor& t = all[s].tensor;
      wait_on(all[s].event, stream);
      if (t.device() == dev) {
        srcs[s] = bytes_of(t, first);
        continue;
      }
      if (!staging.defined()) {
        MemoryCategoryGuard category(MemoryCategory::Communication);
        staging = empty({static_cast<int64_t>(size()) * count}, TensorOptions(mine.dtype()).with_device(dev));
      }
      char* slot = bytes_of(staging, s * count);
      copy_bytes(slot, dev, bytes_of(t, first), t.device(), bytes, stream, op);
      srcs[s] = slot;
    }
    detail::rank_order_sum(srcs, dst, count, mine.dtype(), scale, stream, op);
  }

  // Ends a collective: waits until every rank is done reading the deposits (this stream is then ordered after
  // their reads), then writes the result back when `t` was a strided view.
  void finish(const std::vector<Deposit>& in, Tensor& t, Tensor& work, const char* op) {
    const Device dev = work.device();
    std::vector<Deposit> done = exchange(Deposit{Tensor(), mark(dev)}, op);
    const Stream stream = current_stream(dev);
    for (const Deposit& d : done) wait_on(d.event, stream);
    for (const Deposit& d : in)
      if (d.tensor.defined()) d.tensor.storage().record_stream(stream);
    if (!work.same(t))
      t.copy_(work);
    else
      t.storage().bump_version();
  }

  // Copies a matching sent tensor into t on the receiver's stream; returns the event after the copy.
  std::shared_ptr<Event> copy_in(const Tensor& in, const std::shared_ptr<Event>& ready, Tensor& t) {
    const Device dev = t.device();
    const Stream stream = current_stream(dev);
    wait_on(ready, stream);
    Tensor work = t.is_contiguous() ? t : empty(t.shape(), TensorOptions(t.dtype()).with_device(dev));
    copy_bytes(work.raw_data(), dev, in.raw_data(), in.device(), in.nbytes(), stream, "recv");
    if (!work.same(t))
      t.copy_(work);
    else
      t.storage().bump_version();
    in.storage().record_stream(stream);  // the sender's buffer is freed only after this copy
    return mark(dev);
  }

  std::shared_ptr<LocalGroup> group_;
  int rank_;
  uint64_t seq_ = 0;
};

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_local_group(const std::vector<Worker>& workers,
                                                            MessageMatching matching) {
  TD_CHECK(!workers.empty(), "make_local_group needs at least one worker");
  auto group = std::make_shared<LocalGroup>(static_cast<int>(workers.size()), matching);
  std::vector<std::shared_ptr<Communicator>> comms;
  for (size_t i = 0; i < workers.size(); ++i)
    comms.push_back(std::make_shared<LocalCommunicator>(group, static_cast<int>(i)));
  return comms;
}

}  // namespace parallel
}  // namespace tandem
