// NCCL communicators: stream-ordered point-to-point and collectives, with the rank-order sum for reductions.
#include "parallel/nccl_comm.h"

#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdio>
#include <cstring>
#include <set>

#include "parallel/local_comm.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/error.h"
#include "runtime/base/non_copyable.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/storage.h"
#include "runtime/memory/stream.h"
#include "runtime/memory/stream_check.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/tensor_access.h"

namespace tandem {
namespace parallel {

namespace {

[[noreturn]] void raise_nccl(ncclResult_t r, const char* expr, const char* file, int line) {
  const char* last = ncclGetLastError(nullptr);
  ::tandem::detail::raise<BackendError>(
      ::tandem::detail::concat("NCCL error: ", ncclGetErrorString(r), last && *last ? std::string(": ") + last : ""),
      expr, file, line);
}

}  // namespace

#define TD_NCCL_CHECK(expr) TD_STATUS_CHECK(expr, #expr, ncclSuccess, raise_nccl)

namespace {

using detail::chunk_begin;
using detail::describe;

ncclDataType_t nccl_type(DType d) {
  switch (d) {
    case DType::F32: return ncclFloat32;
    case DType::F64: return ncclFloat64;
    case DType::F16: return ncclFloat16;
    case DType::BF16: return ncclBfloat16;
    case DType::I32: return ncclInt32;
    case DType::I64: return ncclInt64;
    case DType::U8: return ncclUint8;
  }
  return ncclUint8;
}

// ncclGroupStart .. ncclGroupEnd as a scope. When a call inside fails, the exception ends the group on its way
// out (NCCL then drops the group's operations and reports the same error), so that the thread's next NCCL call
// does not go into a group that never ends.
class NcclGroup : NonCopyable {
 public:
  NcclGroup() { TD_NCCL_CHECK(ncclGroupStart()); }
  ~NcclGroup() {
    if (open_) ncclGroupEnd();  // unwinding: the error of the call that failed is the one being reported
  }
  void end() {
    open_ = false;
    TD_NCCL_CHECK(ncclGroupEnd());
  }

 private:
  bool open_ = true;
};

char* at(const Tensor& t, int64_t element) {
  return static_cast<char*>(t.raw_data()) + element * static_cast<int64_t>(dtype_size(t.dtype()));
}

// The NCCL communicator handle, destroyed with the last communicator that uses it.
struct CommHandle {
  ncclComm_t comm = nullptr;
  Stream stream;  // synchronized first, so that destroying the handle never races queued operations
  ~CommHandle() {
    if (comm == nullptr) return;
    if (stream.cuda() != nullptr) ignore_cuda_error(cudaStreamSynchronize(stream.cuda()), "cudaStreamSynchronize");
    ncclResult_t r = ncclCommDestroy(comm);
    if (r != ncclSuccess) std::fprintf(stderr, "tandem: ncclCommDestroy: %s\n", ncclGetErrorString(r));
  }
};

class NcclCommunicator : public Communicator {
 public:
  NcclCommunicator(ncclComm_t comm, const Worker& worker, int rank, int size)
      : handle_(std::make_shared<CommHandle>()),
        device_(worker.device),
        stream_(worker.comm),
        rank_(rank),
        size_(size) {
    handle_->comm = comm;
    handle_->stream = worker.comm;
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "nccl"; }
  bool needs_one_issuer() const override { return true; }

  Request isend(const Tensor& t, int dst, int tag) override {
    check_tensor(t, "isend");
    detail::check_peer(dst, size_, "isend to");
    detail::check_tag(tag);
    TD_CHECK(dst != rank_, "the NCCL backend cannot send to the sending rank itself (rank ", rank_, ")");
    autograd::NoGradGuard no_grad;
    DeviceGuard guard(device_);
    Tensor src = t.contiguous();
    auto done = std::make_shared<Event>();
    enqueue(
        "send", {src}, {},
        [&](cudaStream_t s) {
          TD_NCCL_CHECK(ncclSend(src.raw_data(), src.numel(), nccl_type(src.dtype()), dst, handle_->comm, s));
        },
        /*caller_waits=*/false);
    done->record(stream_);
    note("send", static_cast<int64_t>(src.nbytes()));
    Device dev = device_;
    return Request([done, dev] { current_stream(dev).wait(*done); });
  }

  void recv(Tensor& t, int src, int tag) override {
    check_tensor(t, "recv");
    detail::check_peer(src, size_, "recv from");
    detail::check_tag(tag);
    TD_CHECK(src != rank_, "the NCCL backend cannot receive from the receiving rank itself (rank ", rank_, ")");
    autograd::NoGradGuard no_grad;
    DeviceGuard guard(device_);
    Tensor work = t.is_contiguous() ? t : empty(t.shape(), TensorOptions(t.dtype()).with_device(device_));
    enqueue("recv", {}, {work}, [&](cudaStream_t s) {
      TD_NCCL_CHECK(ncclRecv(work.raw_data(), work.numel(), nccl_type(work.dtype()), src, handle_->comm, s));
    });
    write_back(t, work);
    note("recv", static_cast<int64_t>(t.nbytes()));
  }

  void all_reduce(Tensor& t, double scale) override {
    check_tensor(t, "all_reduce");
    detail::check_sum_args(t.dtype(), scale, "all_reduce");
    autograd::NoGradGuard no_grad;
    DeviceGuard guard(device_);
    Tensor work = t.contiguous();
    const int64_t count = work.numel();
    const int64_t lo = chunk_begin(count, rank_, size_), mine = chunk_begin(count, rank_ + 1, size_) - lo;
    Tensor staging = make_staging(work.dtype(), size_ * mine);
    const ncclDataType_t type = nccl_type(work.dtype());
    enqueue("all_reduce", {}, {work, staging}, [&](cudaStream_t s) {
      // Reduce-scatter by chunks: every rank receives its chunk from every peer and adds them in rank order.
      NcclGroup scatter;
      for (int p = 0; p < size_; ++p) {
        const int64_t b = chunk_begin(count, p, size_), len = chunk_begin(count, p + 1, size_) - b;
        if (p == rank_) continue;
        if (len > 0) TD_NCCL_CHECK(ncclSend(at(work, b), len, type, p, handle_->comm, s));
        if (mine > 0) TD_NCCL_CHECK(ncclRecv(at(staging, p * mine), mine, type, p, handle_->comm, s));
      }
      scatter.end();
      std::vector<const void*> srcs(size_);
      for (int p = 0; p < size_; ++p) srcs[p] = p == rank_ ? at(work, lo) : at(staging, p * mine);
      detail::rank_order_sum(srcs, at(work, lo), mine, work.dtype(), scale, stream_, "all_reduce");
      // All-gather of the reduced chunks.
      NcclGroup gather;
      for (int p = 0; p < size_; ++p) {
        const int64_t b = chunk_begin(count, p, size_), len = chunk_begin(count, p + 1, size_) - b;
        if (p == rank_) continue;
        if (mine > 0) TD_NCCL_CHECK(ncclSend(at(work, lo), mine, type, p, handle_->comm, s));
        if (len > 0) TD_NCCL_CHECK(ncclRecv(at(work, b), len, type, p, handle_->comm, s));
      }
      gather.end();
    });
    write_back(t, work);
    note("all_reduce", detail::all_reduce_bytes(count, dtype_size(work.dtype()), rank_, size_));
  }

  void broadcast(Tensor& t, int root) override {
    check_tensor(t, "broadcast");
    detail::check_peer(root, size_, "broadcast from");
    autograd::NoGradGuard no_grad;
    DeviceGuard guard(device_);
    Tensor work = t.contiguous();
    const std::vector<Tensor> none, mine{work};  // the root only reads
    enqueue("broadcast", rank_ == root ? mine : none, rank_ == root ? none : mine, [&](cudaStream_t s) {
      TD_NCCL_CHECK(ncclBroadcast(work.raw_data(), work.raw_data(), work.numel(), nccl_type(work.dtype()), root,
                                  handle_->comm, s));
    });
    if (rank_ != root) write_back(t, work);
    const int64_t bytes = static_cast<int64_t>(work.nbytes());
    note("broadcast", rank_ == root ? bytes * (size_ - 1) : bytes);
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    check_tensor(in, "all_gather");
    check_tensor(out, "all_gather");
    detail::check_all_gather_args(in, out, size_);
    autograd::NoGradGuard no_grad;
    DeviceGuard guard(device_);
    Tensor src = in.contiguous(), work = out.contiguous();
    enqueue("all_gather", {src}, {work}, [&](cudaStream_t s) {
      TD_NCCL_CHECK(
          ncclAllGather(src.raw_data(), work.raw_data(), src.numel(), nccl_type(src.dtype()), handle_->comm, s));
    });
    write_back(out, work);
    note("all_gather", 2 * static_cast<int64_t>(src.nbytes()) * (size_ - 1));
  }

  void reduce_scatter(const Tensor& in, Tensor& out, double scale) override {
    check_tensor(in, "reduce_scatter");
    check_tensor(out, "reduce_scatter");
    detail::check_reduce_scatter_args(in, out, size_, scale);
    autograd::NoGradGuard no_grad;
    DeviceGuard guard(device_);
    Tensor src = in.contiguous(), work = out.contiguous();
    const int64_t m = work.numel();
    Tensor staging = make_staging(src.dtype(), size_ * m);
    const ncclDataType_t type = nccl_type(src.dtype());
    enqueue("reduce_scatter", {src}, {work, staging}, [&](cudaStream_t s) {
      NcclGroup group;
      for (int p = 0; p < size_; ++p) {
        if (p == rank_ || m == 0) continue;
        TD_NCCL_CHECK(ncclSend(at(src, p * m), m, type, p, handle_->comm, s));
        TD_NCCL_CHECK(ncclRecv(at(staging, p * m), m, type, p, handle_->comm, s));
      }
      group.end();
      std::vector<const void*> srcs(size_);
      for (int p = 0; p < size_; ++p) srcs[p] = p == rank_ ? at(src, rank_ * m) : at(staging, p * m);
      detail::rank_order_sum(srcs, work.raw_data(), m, src.dtype(), scale, stream_, "reduce_scatter");
    });
    write_back(out, work);
    note("reduce_scatter", 2 * static_cast<int64_t>(work.nbytes()) * (size_ - 1));
  }

  void barrier() override {
    DeviceGuard guard(device_);
    if (!token_.defined()) token_ = zeros({1}, TensorOptions(DType::F32).with_device(device_));
    enqueue("barrier", {}, {token_}, [&](cudaStream_t s) {
      TD_NCCL_CHECK(ncclAllReduce(token_.raw_data(), token_.raw_data(), 1, ncclFloat32, ncclSum, handle_->comm, s));
    });
    note("barrier", 0);
  }

  std::shared_ptr<Communicator> split(const std::vector<int>& ranks) override {
    TD_CHECK(!ranks.empty(), "split needs at least one rank");
    std::set<int> seen;
    int me = -1;
    for (size_t i = 0; i < ranks.size(); ++i) {
      detail::check_peer(ranks[i], size_, "split with");
      TD_CHECK(seen.insert(ranks[i]).second, "split lists rank ", ranks[i], " twice");
      if (ranks[i] == rank_) me = static_cast<int>(i);
    }
    DeviceGuard guard(device_);
    release_cached_memory(device_);  // NCCL allocates outside the pool
    ncclComm_t sub = nullptr;
    TD_NCCL_CHECK(ncclCommSplit(handle_->comm, me < 0 ? NCCL_SPLIT_NOCOLOR : 0, me < 0 ? 0 : me, &sub, nullptr));
    if (me < 0) return nullptr;
    Worker w;
    w.device = device_;
    w.comm = stream_;
    return std::make_shared<NcclCommunicator>(sub, w, me, static_cast<int>(ranks.size()));
  }

 private:
  void check_tensor(const Tensor& t, const char* op) const {
    TD_CHECK(t.defined(), op, " of an undefined tensor");
    TD_CHECK_DEVICE(t.device() == device_, op, " on the NCCL communicator of ", device_, " got a tensor on ",
                    t.device(), " (", describe(t), ")");
  }

  Tensor make_staging(DType dtype, int64_t count) const {
    MemoryCategoryGuard category(MemoryCategory::Communication);
    return empty({count}, TensorOptions(dtype).with_device(device_));
  }

  // Queues issue(comm stream), which reads `read` and writes `written`, after the work queued so far on the
  // caller's stream; with caller_waits, the caller's stream then waits for it. The tensors' memory is kept until
  // the comm stream is done with it.
  template <typename F>
  void enqueue(const char* op, const std::vector<Tensor>& read, const std::vector<Tensor>& written, F issue,
               bool caller_waits = true) {
    const Stream caller = current_stream(device_);
    const bool same = caller == stream_;
    if (!same) {
      Event before;
      before.record(caller);
      stream_.wait(before);
    }
    if (stream_check::enabled()) {
      std::vector<stream_check::Access> accesses;
      for (const Tensor& t : read) accesses.push_back(stream_check::reads(t));
      for (const Tensor& t : written) accesses.push_back(stream_check::writes(t));
      stream_check::on_op(op, stream_, accesses.data(), accesses.size());
    }
    issue(stream_.cuda());
    for (const Tensor& t : read) t.storage().record_stream(stream_);
    for (const Tensor& t : written) t.storage().record_stream(stream_);
    if (!same && caller_waits) {
      Event after;
      after.record(stream_);
      caller.wait(after);
    }
  }

  void write_back(Tensor& t, Tensor& work) {
    if (!work.same(t))
      t.copy_(work);
    else
      t.storage().bump_version();
  }

  std::shared_ptr<CommHandle> handle_;
  Device device_;
  Stream stream_;
  int rank_;
  int size_;
  Tensor token_;  // barrier() reduces this one element
};

void check_distinct_gpus(const std::vector<std::string>& ids, const std::vector<std::string>& names) {
  for (size_t i = 0; i < ids.size(); ++i)
    for (size_t j = 0; j < i; ++j)
      TD_CHECK(ids[i] != ids[j], "NCCL cannot put two ranks on one GPU: ranks ", j, " (", names[j], ") and ", i, " (",
               names[i], ") share a GPU; SM partitions of a GPU must use the local backend (make_local_group)");
}

std::string gpu_uuid(Device d) {
  cudaDeviceProp prop;
  TD_CUDA_CHECK(cudaGetDeviceProperties(&prop, d.index));
  return std::string(prop.uuid.bytes, sizeof(prop.uuid.bytes));
}

}  // namespace

std::vector<std::shared_ptr<Communicator>> make_nccl_group(const std::vector<Worker>& workers) {
  TD_CHECK(!workers.empty(), "make_nccl_group needs at least one worker");
  std::vector<std::string> ids, names;
  std::vector<int> devices;
  for (const Worker& w : workers) {
    TD_CHECK_DEVICE(w.device.is_cuda(), "the NCCL backend needs GPU workers, not ", w.name(),
                    " (use make_local_group for CPU workers)");
    ids.push_back(std::to_string(w.device.index));
    names.push_back(w.name());
    devices.push_back(w.device.index);
  }
  check_distinct_gpus(ids, names);
  std::vector<ncclComm_t> comms(workers.size(), nullptr);
  // NCCL allocates its buffers outside the memory pool, which may hold the devices' free memory.
  for (const Worker& w : workers) release_cached_memory(w.device);
  TD_NCCL_CHECK(ncclCommInitAll(comms.data(), static_cast<int>(comms.size()), devices.data()));
  std::vector<std::shared_ptr<Communicator>> out;
  for (size_t i = 0; i < workers.size(); ++i)
    out.push_back(std::make_shared<NcclCommunicator>(comms[i], workers[i], static_cast<int>(i),
                                                     static_cast<int>(workers.size())));
  return out;
}

std::shared_ptr<Communicator> make_nccl_communicator(const Worker& worker, Communicator& bootstrap) {
  TD_CHECK_DEVICE(worker.device.is_cuda(), "the NCCL backend needs a GPU worker, not ", worker.name());
  const int n = bootstrap.size(), rank = bootstrap.rank();
  // Every rank's GPU UUID, so that two ranks on one GPU get a clear error instead of an NCCL failure.
  const std::string uuid = gpu_uuid(worker.device);
  Tensor mine = empty({static_cast<int64_t>(uuid.size())}, TensorOptions(DType::U8).with_device(Device::cpu()));
  std::memcpy(mine.raw_data(), uuid.data(), uuid.size());
  Tensor all = empty({n * static_cast<int64_t>(uuid.size())}, TensorOptions(DType::U8).with_device(Device::cpu()));
  bootstrap.all_gather(mine, all);
  std::vector<std::string> ids, names;
  for (int r = 0; r < n; ++r) {
    ids.emplace_back(static_cast<const char*>(all.raw_data()) + r * uuid.size(), uuid.size());
    names.push_back("rank " + std::to_string(r));
  }
  check_distinct_gpus(ids, names);

  ncclUniqueId id;
  std::memset(&id, 0, sizeof(id));
  if (rank == 0) TD_NCCL_CHECK(ncclGetUniqueId(&id));
  Tensor id_bytes = empty({static_cast<int64_t>(sizeof(id))}, TensorOptions(DType::U8).with_device(Device::cpu()));
  std::memcpy(id_bytes.raw_data(), &id, sizeof(id));
  bootstrap.broadcast(id_bytes, 0);
  std::memcpy(&id, id_bytes.raw_data(), sizeof(id));
  DeviceGuard guard(worker.device);
  release_cached_memory(worker.device);  // NCCL allocates outside the pool
  ncclComm_t comm = nullptr;
  TD_NCCL_CHECK(ncclCommInitRank(&comm, n, id, rank));
  return std::make_shared<NcclCommunicator>(comm, worker, rank, n);
}

}  // namespace parallel
}  // namespace tandem
