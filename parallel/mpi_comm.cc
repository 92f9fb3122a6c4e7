// The MPI backend: nonblocking MPI calls completed by a test loop (so serialized MPI never blocks a peer
// thread), shapes checked across ranks, and reductions summed in rank order like the local backend.
#include "parallel/mpi_comm.h"

#include <mpi/mpi.h>  // Debian's multiarch path to OpenMPI's mpi.h

#include <array>
#include <climits>
#include <cstdlib>
#include <mutex>
#include <thread>

#include "parallel/local_comm.h"
#include "parallel/nccl_comm.h"
#include "parallel/worker.h"
#include "runtime/base/error.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/stream_check.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/tensor_access.h"

namespace tandem {
namespace parallel {

namespace {

using detail::chunk_begin;
using detail::describe;

void check_mpi(int rc, const char* what) {
  if (rc == MPI_SUCCESS) return;
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) len = 0;
  TD_THROW(BackendError, what, " failed: ", std::string(text, len), " (MPI error ", rc, ")");
}

void finalize_mpi() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

// MPI as this process set it up: whether calls must be serialized (thread support below MULTIPLE).
struct MpiProcess {
  bool serialize = false;
  std::mutex mu;
};

MpiProcess& mpi_process() {
  static MpiProcess* p = [] {
    auto* proc = new MpiProcess();  // never destroyed: communicators may outlive static destructors
    int initialized = 0, provided = 0;
    check_mpi(MPI_Initialized(&initialized), "MPI_Initialized");
    if (!initialized) {
      check_mpi(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_MULTIPLE, &provided), "MPI_Init_thread");
      std::atexit(finalize_mpi);
    } else {
      check_mpi(MPI_Query_thread(&provided), "MPI_Query_thread");
    }
    TD_CHECK_T(BackendError, provided >= MPI_THREAD_SERIALIZED,
               "MPI was initialized without thread support (MPI_THREAD_SERIALIZED or more is needed)");
    proc->serialize = provided < MPI_THREAD_MULTIPLE;
    return proc;
  }();
  return *p;
}

// Holds the process's MPI lock while in scope when MPI calls must be serialized.
class MpiCall {
 public:
  MpiCall() : lock_(mpi_process().mu, std::defer_lock) {
    if (mpi_process().serialize) lock_.lock();
  }

 private:
  std::unique_lock<std::mutex> lock_;
};

// Tests the requests until all completed, releasing the lock between tests.
void wait_all(std::vector<MPI_Request>& reqs, const char* what) {
  while (true) {
    int done = 0;
    {
      MpiCall call;
      check_mpi(MPI_Testall(static_cast<int>(reqs.size()), reqs.data(), &done, MPI_STATUSES_IGNORE), what);
    }
    if (done) return;
    std::this_thread::yield();
  }
}

// An MPI type of one element of `dtype` (only the bytes matter: the sums are ours).
MPI_Datatype element_type(DType dtype) {
  switch (dtype_size(dtype)) {
    case 1: return MPI_BYTE;
    case 2: return MPI_UINT16_T;
    case 4: return MPI_UINT32_T;
    default: return MPI_UINT64_T;
  }
}

int as_count(int64_t n, const char* op) {
  TD_CHECK(n <= INT_MAX, op, " over MPI moves at most ", INT_MAX, " elements per message, got ", n);
  return static_cast<int>(n);
}

char* at(const Tensor& t, int64_t element) {
  return static_cast<char*>(t.raw_data()) + element * static_cast<int64_t>(dtype_size(t.dtype()));
}

// A tensor's dtype and shape as sent ahead of its data and compared across ranks.
constexpr int kMaxDims = 14;
using Descriptor = std::array<int64_t, 2 + kMaxDims>;

Descriptor descriptor(const Tensor& t) {
  TD_CHECK_SHAPE(t.dim() <= kMaxDims, "the MPI backend moves tensors of at most ", kMaxDims, " dims, got ",
                 describe(t));
  Descriptor d{};
  d[0] = static_cast<int64_t>(t.dtype());
  d[1] = t.dim();
  for (int64_t i = 0; i < t.dim(); ++i) d[2 + i] = t.size(i);
  return d;
}

Shape shape_of(const Descriptor& d) { return Shape(d.begin() + 2, d.begin() + 2 + d[1]); }
std::string describe(const Descriptor& d) {
  return shape_str(shape_of(d)) + " " + dtype_name(static_cast<DType>(d[0])) + " on cpu";
}

// Payloads travel in pieces of at most 1 GiB (MPI counts are ints).
constexpr int64_t kPiece = int64_t{1} << 30;

void post_pieces(bool send, char* data, int64_t bytes, int peer, int tag, MPI_Comm comm,
                 std::vector<MPI_Request>& reqs) {
  for (int64_t off = 0; off < bytes; off += kPiece) {
    const int len = static_cast<int>(std::min(kPiece, bytes - off));
    MPI_Request r;
    MpiCall call;
    if (send)
      check_mpi(MPI_Isend(data + off, len, MPI_BYTE, peer, tag, comm, &r), "MPI_Isend");
    else
      check_mpi(MPI_Irecv(data + off, len, MPI_BYTE, peer, tag, comm, &r), "MPI_Irecv");
    reqs.push_back(r);
  }
}

class MpiCommunicator : public Communicator {
 public:
  explicit MpiCommunicator(MPI_Comm comm) : comm_(comm) {
    MpiCall call;
    check_mpi(MPI_Comm_set_errhandler(comm_, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler");
    check_mpi(MPI_Comm_rank(comm_, &rank_), "MPI_Comm_rank");
    check_mpi(MPI_Comm_size(comm_, &size_), "MPI_Comm_size");
    int* ub = nullptr;
    int found = 0;
    check_mpi(MPI_Comm_get_attr(comm_, MPI_TAG_UB, &ub, &found), "MPI_Comm_get_attr(MPI_TAG_UB)");
    tag_ub_ = found && ub ? *ub : 32767;
  }

  ~MpiCommunicator() override {
    int finalized = 0;
    MPI_Finalized(&finalized);
    if (!finalized) {
      MpiCall call;
      MPI_Comm_free(&comm_);
    }
  }

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  std::string backend() const override { return "mpi"; }

  Request isend(const Tensor& t, int dst, int tag) override {
    check_cpu(t, "isend");
    detail::check_peer(dst, size_, "isend to");
    check_tag(tag);
    autograd::NoGradGuard no_grad;
    struct Outgoing {
      Descriptor header;
      Tensor data;
      std::vector<MPI_Request> reqs;
    };
    auto out = std::make_shared<Outgoing>();
    out->header = descriptor(t);
    out->data = t.contiguous();
    {
      MPI_Request r;
      MpiCall call;
      check_mpi(MPI_Isend(out->header.data(), static_cast<int>(out->header.size()), MPI_INT64_T, dst, tag, comm_, &r),
                "MPI_Isend");
      out->reqs.push_back(r);
    }
    checked("send", {stream_check::reads(out->data)});
    post_pieces(true, at(out->data, 0), static_cast<int64_t>(out->data.nbytes()), dst, tag, comm_, out->reqs);
    note("send", static_cast<int64_t>(t.nbytes()));
    return Request([out] { wait_all(out->reqs, "send"); });
  }

  void recv(Tensor& t, int src, int tag) override {
    check_cpu(t, "recv");
    detail::check_peer(src, size_, "recv from");
    check_tag(tag);
    autograd::NoGradGuard no_grad;
    Descriptor header{};
    std::vector<MPI_Request> reqs(1);
    {
      MpiCall call;
      check_mpi(MPI_Irecv(header.data(), static_cast<int>(header.size()), MPI_INT64_T, src, tag, comm_, &reqs[0]),
                "MPI_Irecv");
    }
    wait_all(reqs, "recv");
    const Descriptor want = descriptor(t);
    reqs.clear();
    if (header != want) {
      // Take the payload anyway, so that the sender's request completes, then report the mismatch.
      Tensor sink = empty(shape_of(header), TensorOptions(static_cast<DType>(header[0])).with_device(Device::cpu()));
      post_pieces(false, at(sink, 0), static_cast<int64_t>(sink.nbytes()), src, tag, comm_, reqs);
      wait_all(reqs, "recv");
      const std::string msg = "recv on rank " + std::to_string(rank_) + " from rank " + std::to_string(src) + " (tag " +
                              std::to_string(tag) + "): the sender sent " + describe(header) +
                              " but the receiver expects " + describe(t);
      if (header[0] != want[0]) TD_THROW(DTypeError, msg);
      TD_THROW(ShapeError, msg);
    }
    Tensor work = t.is_contiguous() ? t : empty(t.shape(), TensorOptions(t.dtype()).with_device(Device::cpu()));
    checked("recv", {stream_check::writes(work)});
    post_pieces(false, at(work, 0), static_cast<int64_t>(work.nbytes()), src, tag, comm_, reqs);
    wait_all(reqs, "recv");
    write_back(t, work);
    note("recv", static_cast<int64_t>(t.nbytes()));
  }

  void all_reduce(Tensor& t, double scale) override {
    check_cpu(t, "all_reduce");
    detail::check_sum_args(t.dtype(), scale, "all_reduce");
    autograd::NoGradGuard no_grad;
    check_same(t, "all_reduce");
    Tensor work = t.contiguous();
    const int64_t count = work.numel();
    as_count(count, "all_reduce");
    const int64_t lo = chunk_begin(count, rank_, size_), mine = chunk_begin(count, rank_ + 1, size_) - lo;
    Tensor staging = make_staging(work.dtype(), size_ * mine);
    std::vector<int> send_counts(size_), send_displs(size_), recv_counts(size_), recv_displs(size_);
    for (int p = 0; p < size_; ++p) {
      send_displs[p] = static_cast<int>(chunk_begin(count, p, size_));
      send_counts[p] = static_cast<int>(chunk_begin(count, p + 1, size_)) - send_displs[p];
      recv_counts[p] = static_cast<int>(mine);
      recv_displs[p] = static_cast<int>(p * mine);
    }
    const MPI_Datatype type = element_type(work.dtype());
    checked("all_reduce", {stream_check::writes(work), stream_check::writes(staging)});
    std::vector<MPI_Request> reqs(1);
    {
      MpiCall call;
      check_mpi(MPI_Ialltoallv(work.raw_data(), send_counts.data(), send_displs.data(), type, staging.raw_data(),
                               recv_counts.data(), recv_displs.data(), type, comm_, &reqs[0]),
                "MPI_Ialltoallv");
    }
    wait_all(reqs, "all_reduce");
    std::vector<const void*> srcs(size_);
    for (int p = 0; p < size_; ++p) srcs[p] = at(staging, p * mine);
    detail::rank_order_sum(srcs, at(work, lo), mine, work.dtype(), scale, current_stream(Device::cpu()), "all_reduce");
    {
      MpiCall call;
      check_mpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, work.raw_data(), send_counts.data(),
                                send_displs.data(), type, comm_, &reqs[0]),
                "MPI_Iallgatherv");
    }
    wait_all(reqs, "all_reduce");
    write_back(t, work);
    note("all_reduce", detail::all_reduce_bytes(count, dtype_size(work.dtype()), rank_, size_));
  }

  void broadcast(Tensor& t, int root) override {
    check_cpu(t, "broadcast");
    detail::check_peer(root, size_, "broadcast from");
    autograd::NoGradGuard no_grad;
    check_same(t, "broadcast");
    Tensor work = t.contiguous();
    checked("broadcast", {rank_ == root ? stream_check::reads(work) : stream_check::writes(work)});
    std::vector<MPI_Request> reqs(1);
    {
      MpiCall call;
      check_mpi(MPI_Ibcast(work.raw_data(), as_count(work.numel(), "broadcast"), element_type(work.dtype()), root,
                           comm_, &reqs[0]),
                "MPI_Ibcast");
    }
    wait_all(reqs, "broadcast");
    if (rank_ != root) write_back(t, work);
    const int64_t bytes = static_cast<int64_t>(work.nbytes());
    note("broadcast", rank_ == root ? bytes * (size_ - 1) : bytes);
  }

  void all_gather(const Tensor& in, Tensor& out) override {
    check_cpu(in, "all_gather");
    check_cpu(out, "all_gather");
    detail::check_all_gather_args(in, out, size_);
    autograd::NoGradGuard no_grad;
    check_same(in, "all_gather");
    Tensor src = in.contiguous(), work = out.contiguous();
    const MPI_Datatype type = element_type(src.dtype());
    const int n = as_count(src.numel(), "all_gather");
    as_count(work.numel(), "all_gather");
    checked("all_gather", {stream_check::reads(src), stream_check::writes(work)});
    std::vector<MPI_Request> reqs(1);
    {
      MpiCall call;
      check_mpi(MPI_Iallgather(src.raw_data(), n, type, work.raw_data(), n, type, comm_, &reqs[0]), "MPI_Iallgather");
    }
    wait_all(reqs, "all_gather");
    write_back(out, work);
    note("all_gather", 2 * static_cast<int64_t>(src.nbytes()) * (size_ - 1));
  }

  void reduce_scatter(const Tensor& in, Tensor& out, double scale) override {
    check_cpu(in, "reduce_scatter");
    check_cpu(out, "reduce_scatter");
    detail::check_reduce_scatter_args(in, out, size_, scale);
    autograd::NoGradGuard no_grad;
    check_same(in, "reduce_scatter");
    Tensor src = in.contiguous(), work = out.contiguous();
    const int64_t m = work.numel();
    as_count(src.numel(), "reduce_scatter");
    Tensor staging = make_staging(src.dtype(), size_ * m);
    const MPI_Datatype type = element_type(src.dtype());
    checked("reduce_scatter", {stream_check::reads(src), stream_check::writes(staging)});
    std::vector<MPI_Request> reqs(1);
    {
      MpiCall call;
      check_mpi(MPI_Ialltoall(src.raw_data(), static_cast<int>(m), type, staging.raw_data(), static_cast<int>(m), type,
                              comm_, &reqs[0]),
                "MPI_Ialltoall");
    }
    wait_all(reqs, "reduce_scatter");
    std::vector<const void*> srcs(size_);
    for (int p = 0; p < size_; ++p) srcs[p] = at(staging, p * m);
    detail::rank_order_sum(srcs, work.raw_data(), m, src.dtype(), scale, current_stream(Device::cpu()),
                           "reduce_scatter");
    write_back(out, work);
    note("reduce_scatter", 2 * static_cast<int64_t>(work.nbytes()) * (size_ - 1));
  }

  void barrier() override {
    std::vector<MPI_Request> reqs(1);
    {
      MpiCall call;
      check_mpi(MPI_Ibarrier(comm_, &reqs[0]), "MPI_Ibarrier");
    }
    wait_all(reqs, "barrier");
    note("barrier", 0);
  }

  std::shared_ptr<Communicator> split(const std::vector<int>& ranks) override {
    TD_CHECK(!ranks.empty(), "split needs at least one rank");
    std::vector<bool> seen(size_, false);
    int me = -1;
    for (size_t i = 0; i < ranks.size(); ++i) {
      detail::check_peer(ranks[i], size_, "split with");
      TD_CHECK(!seen[ranks[i]], "split lists rank ", ranks[i], " twice");
      seen[ranks[i]] = true;
      if (ranks[i] == rank_) me = static_cast<int>(i);
    }
    // Every rank must pass the same list: compare (length, hash) of every rank's list.
    std::array<int64_t, 2> mine{static_cast<int64_t>(ranks.size()), 0};
    uint64_t hash = 1469598103934665603ull;
    for (int r : ranks) hash = (hash ^ static_cast<uint64_t>(r)) * 1099511628211ull;
    mine[1] = static_cast<int64_t>(hash);
    std::vector<int64_t> all(2 * static_cast<size_t>(size_));
    std::vector<MPI_Request> reqs(1);
    {
      MpiCall call;
      check_mpi(MPI_Iallgather(mine.data(), 2, MPI_INT64_T, all.data(), 2, MPI_INT64_T, comm_, &reqs[0]),
                "MPI_Iallgather");
    }
    wait_all(reqs, "split");
    for (int p = 0; p < size_; ++p)
      TD_CHECK(all[2 * p] == mine[0] && all[2 * p + 1] == mine[1], "split: rank ", p,
               " passed a different rank list than rank ", rank_, " (", shape_str(Shape(ranks.begin(), ranks.end())),
               "); every rank must pass the same list");
    MPI_Comm sub = MPI_COMM_NULL;
    {
      MpiCall call;
      check_mpi(MPI_Comm_split(comm_, me < 0 ? MPI_UNDEFINED : 0, me < 0 ? 0 : me, &sub), "MPI_Comm_split");
    }
    if (me < 0) return nullptr;
    return std::make_shared<MpiCommunicator>(sub);
  }

 private:
  void check_cpu(const Tensor& t, const char* op) const {
    TD_CHECK(t.defined(), op, " of an undefined tensor");
    TD_CHECK_DEVICE(t.device().is_cpu(), "the MPI backend moves CPU tensors; ", op, " got ", describe(t),
                    " (use the NCCL backend for GPU tensors)");
  }

  void check_tag(int tag) const {
    detail::check_tag(tag);
    TD_CHECK(tag <= tag_ub_, "message tags over MPI must be <= ", tag_ub_, ", got ", tag);
  }

  // Every rank's tensor must match rank 0's: the same error is raised on every rank.
  void check_same(const Tensor& t, const char* op) {
    const Descriptor mine = descriptor(t);
    std::vector<int64_t> all(static_cast<size_t>(size_) * mine.size());
    std::vector<MPI_Request> reqs(1);
    {
      MpiCall call;
      check_mpi(MPI_Iallgather(mine.data(), static_cast<int>(mine.size()), MPI_INT64_T, all.data(),
                               static_cast<int>(mine.size()), MPI_INT64_T, comm_, &reqs[0]),
                "MPI_Iallgather");
    }
    wait_all(reqs, op);
    Descriptor ref;
    std::copy(all.begin(), all.begin() + ref.size(), ref.begin());
    for (int p = 1; p < size_; ++p) {
      Descriptor d;
      std::copy(all.begin() + p * d.size(), all.begin() + (p + 1) * d.size(), d.begin());
      const std::string msg = std::string(op) + ": rank " + std::to_string(p) + " passed " + describe(d) +
                              " but rank 0 passed " + describe(ref);
      if (d[0] != ref[0]) TD_THROW(DTypeError, msg);
      if (d != ref) TD_THROW(ShapeError, msg);
    }
  }

  // Reports the buffers an MPI transfer reads and writes to the stream checker, as work of the current stream
  // (MPI moves host memory on behalf of the calling thread).
  static void checked(const char* op, std::initializer_list<stream_check::Access> accesses) {
    if (stream_check::enabled()) stream_check::on_op(op, current_stream(Device::cpu()), accesses);
  }

  static Tensor make_staging(DType dtype, int64_t count) {
    MemoryCategoryGuard category(MemoryCategory::Communication);
    return empty({count}, TensorOptions(dtype).with_device(Device::cpu()));
  }

  static void write_back(Tensor& t, Tensor& work) {
    if (!work.same(t))
      t.copy_(work);
    else
      t.storage().bump_version();
  }

  MPI_Comm comm_;
  int rank_ = 0;
  int size_ = 1;
  int tag_ub_ = 32767;
};

}  // namespace

std::shared_ptr<Communicator> make_mpi_communicator() {
  mpi_process();
  MPI_Comm comm = MPI_COMM_NULL;
  {
    MpiCall call;
    check_mpi(MPI_Comm_dup(MPI_COMM_WORLD, &comm), "MPI_Comm_dup");
  }
  return std::make_shared<MpiCommunicator>(comm);
}

std::shared_ptr<Communicator> make_nccl_communicator_mpi(const Worker& worker) {
  std::shared_ptr<Communicator> bootstrap = make_mpi_communicator();
  return make_nccl_communicator(worker, *bootstrap);
}

}  // namespace parallel
}  // namespace tandem
