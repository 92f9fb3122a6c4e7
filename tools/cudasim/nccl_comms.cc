// The simulated NCCL's communicators: unique ids, the rendezvous of ncclCommInitRank and ncclCommSplit,
// ncclCommInitAll, destruction, the registry of live handles and the one-thread-at-a-time rule.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <sstream>

#include <unistd.h>

#include "tools/cudasim/nccl_internal.h"
#include "tools/cudasim/state.h"

namespace cudasim {
namespace nccl {

// Device memory NCCL keeps per communicator (its buffers and work queues), held against the device's limit.
constexpr size_t kCommBytes = size_t{4} << 20;

struct Join {
  std::string key;   // where it is registered while ranks join
  std::string what;  // names it in messages
  int size = 0;      // ranks that take part
  std::vector<bool> joined;
  int count = 0;
  std::vector<int> devices, colors, keys;  // by member (colors and keys: ncclCommSplit)
  bool complete = false;                   // every rank joined, or the join failed
  ncclResult_t result = ncclSuccess;
  std::string error;
  std::vector<ncclComm*> comms;  // by member once complete (null: NCCL_SPLIT_NOCOLOR)
};

namespace {

// Guards the live handles, their holders and the joins in progress.
std::mutex& mu() {
  static auto* m = new std::mutex();
  return *m;
}
std::set<const ncclComm*>& live() {
  static auto* s = new std::set<const ncclComm*>();
  return *s;
}
std::map<std::string, std::shared_ptr<Join>>& joins() {
  static auto* m = new std::map<std::string, std::shared_ptr<Join>>();
  return *m;
}

// The bytes of an ncclUniqueId made here: a tag, this process's nonce, a serial number that keys the join,
// and the pid (a forked child inherits the nonce, not the pid).
constexpr char kTag[8] = {'c', 'u', 'd', 'a', 's', 'i', 'm', 'N'};
struct IdBytes {
  char tag[8];
  uint64_t nonce;
  uint64_t serial;
  int64_t pid;
};
static_assert(sizeof(IdBytes) <= NCCL_UNIQUE_ID_BYTES, "an ncclUniqueId holds the simulator's id");

uint64_t process_nonce() {
  static const uint64_t nonce = [] {
    std::random_device rd;
    const uint64_t t = static_cast<uint64_t>(std::chrono::steady_clock::now().time_since_epoch().count());
    return (static_cast<uint64_t>(rd()) << 32 ^ rd()) ^ t ^ static_cast<uint64_t>(::getpid());
  }();
  return nonce;
}

std::atomic<uint64_t> next_serial{1};

std::string hex(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

// Removes a communicator that was never handed out. Caller holds mu().
void discard(ncclComm* c) {
  live().erase(c);
  unreserve(c->device, c->reserved);
  delete c;
}

// Creates one communicator per rank of `devices`, each holding kCommBytes of its device. Caller holds mu().
ncclResult_t make_comms(const std::vector<int>& devices, std::vector<ncclComm*>* out, std::string* error) {
  for (size_t r = 0; r < devices.size(); ++r) {
    if (!reserve(devices[r], kCommBytes)) {
      for (size_t q = 0; q < r; ++q) unreserve(devices[q], kCommBytes);
      *error = "rank " + std::to_string(r) + " cannot hold its " + std::to_string(kCommBytes >> 20) +
               " MiB of NCCL buffers on cuda:" + std::to_string(devices[r]) +
               ": the device is full (cudaMalloc would fail; TANDEM_CUDASIM_MEMORY_MB)";
      return ncclUnhandledCudaError;
    }
  }
  std::shared_ptr<Clique> clique = make_clique(devices);
  out->clear();
  for (size_t r = 0; r < devices.size(); ++r) {
    auto* c = new ncclComm();
    c->clique = clique;
    c->rank = static_cast<int>(r);
    c->device = devices[r];
    c->reserved = kCommBytes;
    c->sent.assign(devices.size(), 0);
    c->received.assign(devices.size(), 0);
    live().insert(c);
    out->push_back(c);
  }
  return ncclSuccess;
}

// NCCL refuses two ranks of one communicator on one GPU ("Duplicate GPU detected").
ncclResult_t check_distinct(const std::vector<int>& devices, std::string* error) {
  for (size_t r = 0; r < devices.size(); ++r)
    for (size_t q = 0; q < r; ++q)
      if (devices[q] == devices[r]) {
        *error = "ranks " + std::to_string(q) + " and " + std::to_string(r) +
                 " are both on cuda:" + std::to_string(devices[r]) +
                 ": NCCL refuses two ranks of one communicator on one GPU (make a communicator per GPU, "
                 "or several communicators that share the GPU)";
        return ncclInvalidUsage;
      }
  return ncclSuccess;
}

void complete_init(Join& j) {
  j.result = check_distinct(j.devices, &j.error);
  if (j.result == ncclSuccess) j.result = make_comms(j.devices, &j.comms, &j.error);
}

void complete_split(Join& j) {
  std::map<int, std::vector<int>> groups;  // color -> parent ranks
  for (int r = 0; r < j.size; ++r)
    if (j.colors[r] != NCCL_SPLIT_NOCOLOR) groups[j.colors[r]].push_back(r);
  j.comms.assign(static_cast<size_t>(j.size), nullptr);
  std::vector<ncclComm*> made;
  for (auto& [color, members] : groups) {
    // Ranks in key order, ties in the parent's rank order.
    std::stable_sort(members.begin(), members.end(), [&](int a, int b) { return j.keys[a] < j.keys[b]; });
    std::vector<int> devices;
    for (int r : members) devices.push_back(j.devices[r]);
    std::vector<ncclComm*> comms;
    j.result = make_comms(devices, &comms, &j.error);
    if (j.result != ncclSuccess) {
      j.error = "color " + std::to_string(color) + ": " + j.error;
      for (ncclComm* c : made) discard(c);
      j.comms.assign(static_cast<size_t>(j.size), nullptr);
      return;
    }
    for (size_t i = 0; i < members.size(); ++i) j.comms[static_cast<size_t>(members[i])] = comms[i];
    made.insert(made.end(), comms.begin(), comms.end());
  }
}

// Marks a join failed so that every rank waiting in it returns `r` with `text`. Caller holds mu().
void poison(Join& j, ncclResult_t r, const std::string& text) {
  if (j.complete) return;
  j.complete = true;
  j.result = r;
  j.error = text;
  auto it = joins().find(j.key);
  if (it != joins().end() && it->second.get() == &j) joins().erase(it);
}

// Registers `member` of the join under `key` (made by `fresh` for the first one); *completed tells whether
// this member was the last one (or made the join fail). Caller holds mu().
ncclResult_t enter(const std::string& key, const std::function<std::shared_ptr<Join>()>& fresh, int size, int member,
                   int device, Membership* m, bool* completed) {
  std::shared_ptr<Join>& slot = joins()[key];
  if (!slot) slot = fresh();
  std::shared_ptr<Join> j = slot;
  if (j->size != size) {
    const std::string text = j->what + ": rank " + std::to_string(member) + " gives nranks " + std::to_string(size) +
                             " and an earlier rank gave " + std::to_string(j->size);
    poison(*j, ncclInvalidArgument, text);
    *completed = true;
    return fail(ncclInvalidArgument, text);
  }
  if (j->joined[static_cast<size_t>(member)]) {
    const std::string text = j->what + ": rank " + std::to_string(member) + " joined twice";
    poison(*j, ncclInvalidArgument, text);
    *completed = true;
    return fail(ncclInvalidArgument, text);
  }
  j->joined[static_cast<size_t>(member)] = true;
  j->devices[static_cast<size_t>(member)] = device;
  j->count++;
  m->join = j;
  m->member = member;
  *completed = j->count == j->size;
  return ncclSuccess;
}

std::shared_ptr<Join> new_join(const std::string& key, const std::string& what, int size) {
  auto j = std::make_shared<Join>();
  j->key = key;
  j->what = what;
  j->size = size;
  j->joined.assign(static_cast<size_t>(size), false);
  j->devices.assign(static_cast<size_t>(size), -1);
  j->colors.assign(static_cast<size_t>(size), NCCL_SPLIT_NOCOLOR);
  j->keys.assign(static_cast<size_t>(size), 0);
  return j;
}

// Finishes a join the caller completed (under mu()): creates the communicators, or records the failure.
void finish(Join& j, void (*complete)(Join&)) {
  if (j.complete) return;
  complete(j);
  j.complete = true;
  joins().erase(j.key);
}

}  // namespace

std::string describe(const ncclComm* c) {
  return "communicator " + std::to_string(c->clique->id) + " (rank " + std::to_string(c->rank) + " of " +
         std::to_string(c->clique->size()) + ", cuda:" + std::to_string(c->device) + ")";
}

void new_unique_id(ncclUniqueId* id) {
  std::memset(id, 0, sizeof(*id));
  IdBytes b;
  std::memcpy(b.tag, kTag, sizeof(kTag));
  b.nonce = process_nonce();
  b.serial = next_serial++;
  b.pid = static_cast<int64_t>(::getpid());
  std::memcpy(id->internal, &b, sizeof(b));
}

ncclResult_t hold(ncclComm_t comm, const char* api) {
  if (comm == nullptr) return fail(ncclInvalidArgument, std::string(api) + ": comm is NULL");
  std::lock_guard<std::mutex> lock(mu());
  if (live().count(comm) == 0)
    return fail(ncclInvalidArgument,
                std::string(api) + ": " + hex(comm) + " is not a live communicator (destroyed, or never created)");
  if (comm->holds > 0 && comm->holder != std::this_thread::get_id())
    return fail(ncclInvalidUsage,
                std::string(api) + ": " + describe(comm) +
                    " is being used by another host thread at the same time (NCCL's communicators are not "
                    "thread-safe: one thread at a time issues its calls, and one thread all of a group's)");
  comm->holder = std::this_thread::get_id();
  comm->holds++;
  return ncclSuccess;
}

void release(ncclComm_t comm) {
  std::lock_guard<std::mutex> lock(mu());
  if (--comm->holds == 0) comm->holder = std::thread::id();
}

ncclResult_t check_init(int nranks, const ncclUniqueId& id, int rank) {
  IdBytes b;
  std::memcpy(&b, id.internal, sizeof(b));
  const bool ours = std::memcmp(b.tag, kTag, sizeof(kTag)) == 0;
  if (!ours || b.nonce != process_nonce() || b.pid != static_cast<int64_t>(::getpid())) {
    const std::string origin = ours ? "was made by another process (pid " + std::to_string(b.pid) + ")"
                                    : "was not made by ncclGetUniqueId of the simulated NCCL";
    return fail(ncclInvalidUsage, "ncclCommInitRank: the ncclUniqueId " + origin +
                                      ": the simulated NCCL joins ranks of one process only (ranks in other "
                                      "processes, as under mpirun, need real GPUs and NCCL)");
  }
  if (nranks < 1) return fail(ncclInvalidArgument, "ncclCommInitRank: nranks " + std::to_string(nranks) + " < 1");
  if (rank < 0 || rank >= nranks)
    return fail(ncclInvalidArgument,
                "ncclCommInitRank: rank " + std::to_string(rank) + " is not in [0, " + std::to_string(nranks) + ")");
  return ncclSuccess;
}

ncclResult_t join_init(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, int device, Membership* m) {
  IdBytes b;
  std::memcpy(&b, id.internal, sizeof(b));
  const std::string key = "init " + std::to_string(b.serial);
  m->out = out;
  bool completed = false;
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> lock(mu());
    auto fresh = [&] {
      return new_join(key, "ncclCommInitRank (unique id #" + std::to_string(b.serial) + ")", nranks);
    };
    r = enter(key, fresh, nranks, rank, device, m, &completed);
    if (r == ncclSuccess && completed) finish(*m->join, complete_init);
  }
  if (completed) notify_all();
  return r;
}

ncclResult_t join_split(ncclComm* parent, int color, int key, ncclComm_t* out, Membership* m) {
  const std::shared_ptr<Clique> clique = parent->clique;
  const uint64_t n = parent->splits++;
  const std::string name = "ncclCommSplit #" + std::to_string(n) + " of communicator " + std::to_string(clique->id);
  m->out = out;
  bool completed = false;
  ncclResult_t r;
  {
    std::lock_guard<std::mutex> lock(mu());
    auto fresh = [&] { return new_join(name, name, clique->size()); };
    r = enter(name, fresh, clique->size(), parent->rank, parent->device, m, &completed);
    if (r == ncclSuccess) {
      m->join->colors[static_cast<size_t>(parent->rank)] = color;
      m->join->keys[static_cast<size_t>(parent->rank)] = key;
      if (completed) finish(*m->join, complete_split);
    }
  }
  if (completed) notify_all();
  return r;
}

ncclResult_t await(const Membership& m) {
  Join& j = *m.join;
  try {
    wait_until(
        [&] {
          std::lock_guard<std::mutex> lock(mu());
          return j.complete;
        },
        j.what + ", rank " + std::to_string(m.member) + ", waiting for the other ranks to join");
  } catch (const Fault& f) {
    {
      std::lock_guard<std::mutex> lock(mu());
      poison(j, ncclInvalidUsage,
             f.message + " (" + std::to_string(j.count) + " of " + std::to_string(j.size) + " ranks joined)");
    }
    notify_all();
  }
  std::lock_guard<std::mutex> lock(mu());
  if (j.result != ncclSuccess) return fail(j.result, j.what + ": " + j.error);
  *m.out = j.comms[static_cast<size_t>(m.member)];
  return ncclSuccess;
}

ncclResult_t init_all(ncclComm_t* comms, const std::vector<int>& devices) {
  std::string error;
  std::vector<ncclComm*> made;
  std::lock_guard<std::mutex> lock(mu());
  ncclResult_t r = check_distinct(devices, &error);
  if (r == ncclSuccess) r = make_comms(devices, &made, &error);
  if (r != ncclSuccess) return fail(r, "ncclCommInitAll: " + error);
  std::copy(made.begin(), made.end(), comms);
  return ncclSuccess;
}

ncclResult_t destroy(ncclComm_t comm) {
  if (comm == nullptr) return ncclSuccess;  // as NCCL
  std::lock_guard<std::mutex> lock(mu());
  if (live().count(comm) == 0)
    return fail(ncclInvalidArgument,
                "ncclCommDestroy: " + hex(comm) + " is not a live communicator (destroyed already, or never created)");
  if (comm->holds > 0)
    return fail(ncclInvalidUsage, "ncclCommDestroy: " + describe(comm) +
                                      " is in use by a host thread (a call in progress, or a group not ended)");
  // Operations already queued keep the clique; they do not need the handle.
  discard(comm);
  return ncclSuccess;
}

}  // namespace nccl
}  // namespace cudasim
