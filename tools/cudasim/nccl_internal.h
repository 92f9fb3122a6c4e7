// The simulated NCCL's internal interface: communicators, the cliques their ranks share, operations and the
// rendezvous that create communicators. Shared by nccl.cc (the API and groups), nccl_comms.cc (creation and
// destruction), nccl_ops.cc (operations on the streams) and nccl_types.cc (datatypes and reductions).
#pragma once

#include <nccl.h>

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <tuple>
#include <vector>

#include "tools/cudasim/sim.h"

namespace cudasim {
namespace nccl {

// Records `text` as the calling thread's last error (ncclGetLastError) and returns `r`. The text is per
// thread because Tandem drives ranks from several threads, each reading the text of its own failure.
ncclResult_t fail(ncclResult_t r, const std::string& text);
const char* last_error();

// ---- datatypes and reductions (nccl_types.cc) ----

// Bytes of one element; 0 for a value that is not a datatype.
size_t type_size(ncclDataType_t t);
std::string type_name(ncclDataType_t t);
std::string op_name(ncclRedOp_t op);
// Whether the simulator can reduce elements of `t` (fp8 is moved but not reduced).
bool reducible(ncclDataType_t t);
// out[i] = in[0][i] op in[1][i] op ... in rank order, every step rounded to the type as a GPU computing in
// that type does; ncclAvg divides the sum by the number of inputs. `out` may not alias an input.
void reduce(ncclRedOp_t op, ncclDataType_t t, const std::vector<const void*>& in, void* out, size_t count);

// ---- operations ----

enum class Kind { AllReduce, Broadcast, AllGather, Send, Recv };

struct Op {
  Kind kind = Kind::AllReduce;
  const void* sendbuff = nullptr;
  void* recvbuff = nullptr;
  size_t count = 0;  // AllGather: elements each rank sends
  ncclDataType_t type = ncclFloat32;
  ncclRedOp_t redop = ncclSum;  // AllReduce
  int root = 0;                 // Broadcast: the root; Send and Recv: the peer
  uint64_t seq = 0;             // the communicator's k-th collective, or the pair's k-th message one way
};

// ---- cliques: the ranks of one communicator, as its operations meet on the streams ----

// A collective as its ranks arrive: the last to arrive does the work for all.
struct CollectiveSlot {
  std::vector<Op> posted;
  std::vector<bool> arrived;
  int first = -1;     // the rank every later one is compared with
  int count = 0;      // ranks arrived
  int left = 0;       // ranks whose task has finished with the slot
  std::string error;  // a mismatch, or a rank that gave up: no rank does the work any more
  bool working = false, done = false;
};

// One message from `src` to `dst`: the side that arrives second copies.
struct Message {
  Op send, recv;
  bool has_send = false, has_recv = false;
  int left = 0;
  std::string error;
  bool copying = false, done = false;
};

struct Clique {
  uint64_t id = 0;           // names the communicator in messages
  std::vector<int> devices;  // by rank
  std::mutex mu;             // guards the maps
  std::map<uint64_t, CollectiveSlot> collectives;
  std::map<std::tuple<int, int, uint64_t>, Message> messages;  // (src, dst, seq)
  int size() const { return static_cast<int>(devices.size()); }
  std::string rank_name(int r) const;  // "rank 1 (cuda:1)"
};
std::shared_ptr<Clique> make_clique(std::vector<int> devices);

}  // namespace nccl
}  // namespace cudasim

// A rank's communicator: ncclComm_t points to one.
struct ncclComm {
  std::shared_ptr<cudasim::nccl::Clique> clique;
  int rank = 0;
  int device = 0;
  size_t reserved = 0;  // device bytes held for it
  // Issued so far (changed only by the thread that holds the communicator).
  uint64_t collectives = 0;
  uint64_t splits = 0;
  std::vector<uint64_t> sent, received;  // by peer
  // The host thread using it now and how many calls or group entries hold it (guarded by the registry).
  std::thread::id holder;
  int holds = 0;
};

namespace cudasim {
namespace nccl {

// "communicator 3 (rank 1 of 4, cuda:1)"
std::string describe(const ncclComm* c);

// ---- communicators (nccl_comms.cc) ----

void new_unique_id(ncclUniqueId* id);
// ncclCommInitAll: one communicator per device of `devices`, rank i on devices[i].
ncclResult_t init_all(ncclComm_t* comms, const std::vector<int>& devices);
ncclResult_t destroy(ncclComm_t comm);

// Holds a live communicator for the calling thread during `api`: NCCL's communicators are not thread-safe,
// so a second thread using one at the same time gets ncclInvalidUsage; a handle that is not a live
// communicator gets ncclInvalidArgument.
ncclResult_t hold(ncclComm_t comm, const char* api);
void release(ncclComm_t comm);

// A communicator creation that every rank takes part in (ncclCommInitRank, ncclCommSplit): each rank
// registers, then awaits the others; the last to register creates every rank's communicator.
struct Join;
struct Membership {
  std::shared_ptr<Join> join;
  int member = 0;
  ncclComm_t* out = nullptr;
};
// Checks ncclCommInitRank's arguments: an id made by this process, a rank in [0, nranks).
ncclResult_t check_init(int nranks, const ncclUniqueId& id, int rank);
ncclResult_t join_init(ncclComm_t* out, int nranks, const ncclUniqueId& id, int rank, int device, Membership* m);
ncclResult_t join_split(ncclComm* parent, int color, int key, ncclComm_t* out, Membership* m);
// Waits (with the simulator's watchdog) for the other ranks and stores this rank's communicator in *m.out.
ncclResult_t await(const Membership& m);

// ---- operations on the streams (nccl_ops.cc) ----

// Gives the operations their sequence numbers and queues them on `stream` as one task: they progress
// together (a group), each waiting for its peers' tasks on their own streams.
void issue(ncclComm* comm, StreamImpl* stream, std::vector<Op> ops);

}  // namespace nccl
}  // namespace cudasim
