// The simulated NCCL's operations on the streams: each rank's task posts its operations to the clique, the
// last rank to arrive at a collective (the second side of a message) moves the data for all of them, and
// every task waits until its operations are done, a peer's device faults or the watchdog fires.
#include <atomic>
#include <cstring>

#include "tools/cudasim/counters.h"
#include "tools/cudasim/nccl_internal.h"
#include "tools/cudasim/state.h"

namespace cudasim {
namespace nccl {

std::string Clique::rank_name(int r) const {
  return "rank " + std::to_string(r) + " (cuda:" + std::to_string(devices[static_cast<size_t>(r)]) + ")";
}

std::shared_ptr<Clique> make_clique(std::vector<int> devices) {
  static std::atomic<uint64_t> next_id{1};
  auto c = std::make_shared<Clique>();
  c->id = next_id++;
  c->devices = std::move(devices);
  return c;
}

namespace {

const char* kind_name(Kind k) {
  switch (k) {
    case Kind::AllReduce: return "ncclAllReduce";
    case Kind::Broadcast: return "ncclBroadcast";
    case Kind::AllGather: return "ncclAllGather";
    case Kind::Send: return "ncclSend";
    case Kind::Recv: return "ncclRecv";
  }
  return "?";
}

bool is_collective(Kind k) { return k == Kind::AllReduce || k == Kind::Broadcast || k == Kind::AllGather; }

// "ncclAllReduce(count 8, ncclFloat32, ncclSum)": what must match across ranks.
std::string signature(const Op& op) {
  std::string s = std::string(kind_name(op.kind)) + "(count " + std::to_string(op.count) + ", " + type_name(op.type);
  if (op.kind == Kind::AllReduce) s += ", " + op_name(op.redop);
  if (op.kind == Kind::Broadcast) s += ", root " + std::to_string(op.root);
  return s + ")";
}

// One of a task's operations once posted.
struct Item {
  Op op;
  bool worker = false;  // this task moves the data
  std::vector<Op> ops;  // the worker's view: every rank's operation, or {send, recv}
};

using MessageKey = std::tuple<int, int, uint64_t>;

MessageKey key_of(int rank, const Op& op) {
  return op.kind == Kind::Send ? MessageKey{rank, op.root, op.seq} : MessageKey{op.root, rank, op.seq};
}

std::string where(const Clique& c, int rank) {
  return "communicator " + std::to_string(c.id) + ", " + c.rank_name(rank);
}

std::string label(const Op& op) {
  std::string s = std::string(kind_name(op.kind)) + " #" + std::to_string(op.seq);
  if (op.kind == Kind::Send) s += " to rank " + std::to_string(op.root);
  if (op.kind == Kind::Recv) s += " from rank " + std::to_string(op.root);
  return s;
}

bool same_collective(const Op& a, const Op& b) {
  if (a.kind != b.kind || a.count != b.count || a.type != b.type) return false;
  if (a.kind == Kind::AllReduce) return a.redop == b.redop;
  if (a.kind == Kind::Broadcast) return a.root == b.root;
  return true;
}

// What is wrong with the memory the operation reads and writes, as seen from the rank's own device ("" when
// nothing): memory of another device faults there (cudaErrorIllegalAddress). Checked when the operation is
// issued (see access_problem).
std::string buffer_problem(const Clique& c, int rank, const Op& op) {
  const int device = c.devices[static_cast<size_t>(rank)];
  const size_t bytes = op.count * type_size(op.type);
  if (bytes == 0) return "";
  const std::string name = kind_name(op.kind), at = " (" + where(c, rank) + ")";
  std::vector<Access> uses;
  switch (op.kind) {
    case Kind::AllReduce:
      uses = {{op.sendbuff, bytes, name + " sendbuff" + at}, {op.recvbuff, bytes, name + " recvbuff" + at}};
      break;
    case Kind::Broadcast:
      if (rank == op.root) uses.push_back({op.sendbuff, bytes, name + " sendbuff" + at});
      uses.push_back({op.recvbuff, bytes, name + " recvbuff" + at});
      break;
    case Kind::AllGather:
      uses = {{op.sendbuff, bytes, name + " sendbuff" + at},
              {op.recvbuff, bytes * static_cast<size_t>(c.size()), name + " recvbuff" + at}};
      break;
    case Kind::Send: uses = {{op.sendbuff, bytes, name + " sendbuff" + at}}; break;
    case Kind::Recv: uses = {{op.recvbuff, bytes, name + " recvbuff" + at}}; break;
  }
  for (const Access& a : uses) {
    std::string problem = access_problem(device, a.ptr, a.bytes, a.what);
    if (!problem.empty()) return problem;
  }
  return "";
}

// Posts one operation (caller holds c.mu); it becomes this task's work when it completes the match.
Item post(Clique& c, int rank, const Op& op) {
  Item item;
  item.op = op;
  const size_t n = static_cast<size_t>(c.size());
  if (is_collective(op.kind)) {
    CollectiveSlot& s = c.collectives[op.seq];
    if (s.posted.empty()) {
      s.posted.resize(n);
      s.arrived.assign(n, false);
    }
    s.posted[static_cast<size_t>(rank)] = op;
    s.arrived[static_cast<size_t>(rank)] = true;
    s.count++;
    if (s.first < 0) {
      s.first = rank;
    } else if (s.error.empty() && !same_collective(s.posted[static_cast<size_t>(s.first)], op)) {
      s.error = "collective #" + std::to_string(op.seq) + " of communicator " + std::to_string(c.id) +
                " differs between ranks: " + c.rank_name(s.first) + " issued " +
                signature(s.posted[static_cast<size_t>(s.first)]) + " and " + c.rank_name(rank) + " issued " +
                signature(op) + " (NCCL would hang or corrupt data)";
    }
    if (s.count == c.size() && s.error.empty()) {
      s.working = true;
      item.worker = true;
      item.ops = s.posted;
    }
    return item;
  }
  const MessageKey key = key_of(rank, op);
  Message& m = c.messages[key];
  if (op.kind == Kind::Send) {
    m.send = op;
    m.has_send = true;
  } else {
    m.recv = op;
    m.has_recv = true;
  }
  if (m.has_send && m.has_recv && m.error.empty()) {
    if (m.send.count != m.recv.count || m.send.type != m.recv.type) {
      const int src = std::get<0>(key), dst = std::get<1>(key);
      m.error = "message #" + std::to_string(op.seq) + " from rank " + std::to_string(src) + " to rank " +
                std::to_string(dst) + " of communicator " + std::to_string(c.id) + ": " + c.rank_name(src) + " sends " +
                signature(m.send) + " and " + c.rank_name(dst) + " receives " + signature(m.recv) +
                " (NCCL needs the same count and datatype on both sides; it would corrupt data or hang)";
    } else {
      m.copying = true;
      item.worker = true;
      item.ops = {m.send, m.recv};
    }
  }
  return item;
}

// Moves the data of an operation that every rank (both sides) has posted. Runs without the lock: every other
// task involved waits until it is done, so nothing else touches the buffers (in-place ones included).
void work(const Clique& c, const Item& item) {
  const Op& op = item.op;
  const size_t bytes = op.count * type_size(op.type);
  switch (op.kind) {
    case Kind::Send:
    case Kind::Recv:
      if (bytes > 0) std::memmove(item.ops[1].recvbuff, item.ops[0].sendbuff, bytes);
      return;
    case Kind::AllReduce: {
      std::vector<const void*> in;
      for (const Op& o : item.ops) in.push_back(o.sendbuff);
      std::vector<char> result(bytes);
      reduce(op.redop, op.type, in, result.data(), op.count);
      for (const Op& o : item.ops) std::memcpy(o.recvbuff, result.data(), bytes);
      return;
    }
    case Kind::Broadcast: {
      const char* src = static_cast<const char*>(item.ops[static_cast<size_t>(op.root)].sendbuff);
      const std::vector<char> data(src, src + bytes);
      for (const Op& o : item.ops) std::memcpy(o.recvbuff, data.data(), bytes);
      return;
    }
    case Kind::AllGather: {
      const size_t n = static_cast<size_t>(c.size());
      std::vector<char> data(bytes * n);
      for (size_t r = 0; r < n; ++r) std::memcpy(data.data() + r * bytes, item.ops[r].sendbuff, bytes);
      for (const Op& o : item.ops) std::memcpy(o.recvbuff, data.data(), bytes * n);
      return;
    }
  }
}

// Why a posted operation can no longer complete ("" while it can or once it has: see *done). Caller holds
// c.mu. Work once started always finishes, so only an operation nobody works on gives up when the device of
// one of its ranks has faulted (that rank's queued work will never run).
std::string failure(Clique& c, int rank, const Op& op, bool* done) {
  std::vector<int> ranks;
  bool started;
  if (is_collective(op.kind)) {
    const CollectiveSlot& s = c.collectives.at(op.seq);
    *done = s.done;
    if (s.done) return "";
    if (!s.error.empty()) return s.error;
    started = s.working;
    for (int r = 0; r < c.size(); ++r) ranks.push_back(r);
  } else {
    const Message& m = c.messages.at(key_of(rank, op));
    *done = m.done;
    if (m.done) return "";
    if (!m.error.empty()) return m.error;
    started = m.copying;
    ranks = {rank, op.root};
  }
  if (started) return "";
  for (int r : ranks) {
    const cudaError_t e = sticky_error(c.devices[static_cast<size_t>(r)]);
    if (e != cudaSuccess)
      return label(op) + " of " + where(c, rank) + " cannot complete: " + c.rank_name(r) +
             " lost its device's context (" + cudaGetErrorName(e) + ")";
  }
  return "";
}

// What the task waits for, for the watchdog's report. Caller holds c.mu.
std::string waiting_for(Clique& c, int rank, const std::vector<Item>& items) {
  std::string s;
  for (const Item& item : items) {
    const Op& op = item.op;
    std::string missing;
    if (is_collective(op.kind)) {
      const CollectiveSlot& slot = c.collectives.at(op.seq);
      if (slot.done) continue;
      for (int r = 0; r < c.size(); ++r)
        if (!slot.arrived[static_cast<size_t>(r)]) missing += (missing.empty() ? "rank " : ", ") + std::to_string(r);
      missing = missing.empty() ? "its data movement" : missing;
    } else {
      const Message& m = c.messages.at(key_of(rank, op));
      if (m.done) continue;
      missing = op.kind == Kind::Send ? "the matching ncclRecv of rank " + std::to_string(op.root)
                                      : "the matching ncclSend of rank " + std::to_string(op.root);
    }
    s += (s.empty() ? "" : "; ") + label(op) + " waits for " + missing;
  }
  return where(c, rank) + ": " + s;
}

// The task is done with an operation (caller holds c.mu): one that failed before any work started is marked
// failed for the ranks still to come, and the slot goes once every rank has left it.
void leave(Clique& c, int rank, const Op& op, const std::string& why) {
  if (is_collective(op.kind)) {
    CollectiveSlot& s = c.collectives.at(op.seq);
    if (!why.empty() && !s.working && s.error.empty()) s.error = why;
    if (++s.left == c.size()) c.collectives.erase(op.seq);
    return;
  }
  const MessageKey key = key_of(rank, op);
  Message& m = c.messages.at(key);
  if (!why.empty() && !m.copying && m.error.empty()) m.error = why;
  if (++m.left == 2) c.messages.erase(key);
}

void run(Clique& c, int rank, const std::vector<Op>& ops, const std::string& buffer_fault) {
  if (!buffer_fault.empty()) fault(cudaErrorIllegalAddress, buffer_fault);
  std::vector<Item> items;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    for (const Op& op : ops) items.push_back(post(c, rank, op));
  }
  for (const Item& item : items) {
    if (!item.worker) continue;
    work(c, item);
    std::lock_guard<std::mutex> lock(c.mu);
    if (is_collective(item.op.kind))
      c.collectives.at(item.op.seq).done = true;
    else
      c.messages.at(key_of(rank, item.op)).done = true;
  }
  notify_all();  // peers wait for the work done here, and for mismatches found when posting

  auto settle = [&](const std::string& timeout) {
    std::vector<std::string> failures;
    {
      std::lock_guard<std::mutex> lock(c.mu);
      for (const Item& item : items) {
        bool done = false;
        std::string why = failure(c, rank, item.op, &done);
        if (!done && why.empty()) why = timeout;
        if (!done) failures.push_back(why);
        leave(c, rank, item.op, why);
      }
    }
    notify_all();  // a failure marked here stops peers that still wait
    return failures;
  };
  std::string what;
  {
    std::lock_guard<std::mutex> lock(c.mu);
    what = waiting_for(c, rank, items);
  }
  try {
    wait_until(
        [&] {
          std::lock_guard<std::mutex> lock(c.mu);
          for (const Item& item : items) {
            bool done = false;
            if (failure(c, rank, item.op, &done).empty() && !done) return false;
          }
          return true;
        },
        what);
  } catch (const Fault& f) {
    settle(f.message);
    throw;
  }
  const std::vector<std::string> failures = settle("");
  if (failures.empty()) return;
  std::string text;
  for (const std::string& f : failures) text += (text.empty() ? "" : "; ") + f;
  fault(cudaErrorLaunchFailure, text);
}

}  // namespace

void issue(ncclComm* comm, StreamImpl* stream, std::vector<Op> ops) {
  std::vector<Op> queued;
  for (Op& op : ops) {
    if (is_collective(op.kind)) {
      if (op.count == 0) continue;  // NCCL returns at once from a collective of no elements
      op.seq = comm->collectives++;
    } else if (op.kind == Kind::Send) {
      op.seq = comm->sent[static_cast<size_t>(op.root)]++;
    } else {
      op.seq = comm->received[static_cast<size_t>(op.root)]++;
    }
    queued.push_back(op);
  }
  if (queued.empty()) return;
  const std::string what = queued.size() == 1 ? kind_name(queued[0].kind) : "ncclGroupEnd";
  std::shared_ptr<Clique> clique = comm->clique;
  const int rank = comm->rank;
  std::string buffer_fault;
  for (const Op& op : queued)
    if (buffer_fault.empty()) buffer_fault = buffer_problem(*clique, rank, op);
  // Cost records: the bytes each rank sends and receives (an all-gather receives every rank's part).
  std::vector<TandemCudasimOp> records;
  if (counters::records(counters::mode())) {
    const char* classes[] = {"all_reduce", "broadcast", "all_gather", "send", "recv"};
    for (const Op& op : queued) {
      const double bytes = static_cast<double>(op.count * type_size(op.type));
      const int ranks = clique->size();
      TandemCudasimOp r =
          counters::library_op(TANDEM_CUDASIM_LIBRARY, comm->device, stream->id, kind_name(op.kind),
                               type_name(op.type) + " x " + std::to_string(op.count),
                               classes[static_cast<int>(op.kind)], "", 0, op.kind == Kind::Recv ? 0 : bytes,
                               op.kind == Kind::Send        ? 0
                               : op.kind == Kind::AllGather ? bytes * ranks
                                                            : bytes);
      r.ranks = ranks;
      records.push_back(r);
    }
  }
  enqueue(stream, what, [clique, rank, queued, buffer_fault, records] {
    run(*clique, rank, queued, buffer_fault);
    for (const TandemCudasimOp& r : records) counters::record(r);
  });
}

}  // namespace nccl
}  // namespace cudasim
