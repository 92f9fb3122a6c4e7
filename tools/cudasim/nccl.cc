// The simulated NCCL's API as nccl.h declares it: argument checks, error texts and groups; communicators are
// made in nccl_comms.cc and operations run on the streams in nccl_ops.cc.
#include <nccl.h>

#include <map>

#include "tools/cudasim/capture.h"
#include "tools/cudasim/nccl_internal.h"
#include "tools/cudasim/state.h"

namespace cudasim {
namespace nccl {

namespace {

thread_local std::string tl_last_error;

// What a group (ncclGroupStart .. the outermost ncclGroupEnd) has collected on this thread.
struct Group {
  struct Queued {
    ncclComm* comm;  // held until the group ends
    StreamImpl* stream;
    Op op;
  };
  int depth = 0;
  ncclResult_t error = ncclSuccess;  // the first call that failed: ncclGroupEnd returns it
  std::vector<Queued> ops;
  std::vector<Membership> joins;  // ncclCommInitRank and ncclCommSplit: they complete at the end
  std::vector<ncclComm*> held;    // parents of ncclCommSplit
};
thread_local Group group;

// Every failure of a call inside a group is also the group's.
ncclResult_t note(ncclResult_t r) {
  if (r != ncclSuccess && group.depth > 0 && group.error == ncclSuccess) group.error = r;
  return r;
}

ncclResult_t check_op(const char* api, const ncclComm* c, const Op& op) {
  const std::string at = std::string(api) + " on " + describe(c) + ": ";
  if (type_size(op.type) == 0)
    return fail(ncclInvalidArgument, at + "unknown datatype " + std::to_string(static_cast<int>(op.type)));
  if (op.kind == Kind::AllReduce) {
    const int redop = static_cast<int>(op.redop);
    if (redop < 0 || redop >= static_cast<int>(ncclNumOps))
      return fail(ncclInvalidArgument, at + "unknown reduction op " + std::to_string(redop) +
                                           " (ops made by ncclRedOpCreatePreMulSum are not simulated)");
    if (!reducible(op.type))
      return fail(ncclInvalidArgument, at + "the simulator has no arithmetic for " + type_name(op.type) +
                                           " (fp8 data is moved, not reduced)");
  }
  const int n = c->clique->size();
  const bool p2p = op.kind == Kind::Send || op.kind == Kind::Recv;
  if ((op.kind == Kind::Broadcast || p2p) && (op.root < 0 || op.root >= n))
    return fail(ncclInvalidArgument, at + (p2p ? "peer " : "root ") + std::to_string(op.root) +
                                         " is not a rank of the communicator (0.." + std::to_string(n - 1) + ")");
  if (op.count > 0) {
    const bool reads = op.kind != Kind::Recv && (op.kind != Kind::Broadcast || op.root == c->rank);
    if (reads && op.sendbuff == nullptr) return fail(ncclInvalidArgument, at + "sendbuff is NULL");
    if (op.kind != Kind::Send && op.recvbuff == nullptr) return fail(ncclInvalidArgument, at + "recvbuff is NULL");
  }
  return ncclSuccess;
}

// The stream an operation of `c` runs on: the default stream means the default stream of c's device.
StreamImpl* stream_of(const char* api, const ncclComm* c, cudaStream_t stream, ncclResult_t* r) {
  const int caller = current_device();
  set_current_device(c->device);
  cudaError_t err;
  StreamImpl* s = resolve_stream(stream, &err);
  set_current_device(caller);
  if (s == nullptr) {
    *r = fail(ncclUnhandledCudaError, std::string(api) + " on " + describe(c) + ": the stream cannot take work: " +
                                          cudaGetErrorName(err) + " (" + cudaGetErrorString(err) + ")");
    return nullptr;
  }
  if (capturing(s)) {
    // NVIDIA's NCCL can be captured; the simulated one matches operations as they are issued, so it cannot.
    const std::string why =
        std::string(api) + " on " + describe(c) + " on a capturing stream: NCCL inside stream capture is not simulated";
    fail_capture(s, cudaErrorStreamCaptureUnsupported, why);
    *r = fail(ncclInvalidUsage, why);
    return nullptr;
  }
  if (stream_device(s) != c->device) {
    *r = fail(ncclInvalidUsage, std::string(api) + " on " + describe(c) +
                                    ": the stream belongs to cuda:" + std::to_string(stream_device(s)) +
                                    "; a communicator's operations run on streams of its own device");
    return nullptr;
  }
  *r = ncclSuccess;
  return s;
}

ncclResult_t submit(const char* api, ncclComm_t comm, cudaStream_t stream, const Op& op) {
  if (ncclResult_t r = hold(comm, api)) return note(r);
  ncclResult_t r = check_op(api, comm, op);
  StreamImpl* s = r == ncclSuccess ? stream_of(api, comm, stream, &r) : nullptr;
  if (r != ncclSuccess) {
    release(comm);
    return note(r);
  }
  if (group.depth > 0) {
    group.ops.push_back({comm, s, op});
    return ncclSuccess;
  }
  issue(comm, s, {op});
  release(comm);
  return ncclSuccess;
}

// The operation of one entry point: `root` is Broadcast's root, or Send's and Recv's peer.
ncclResult_t submit(const char* api, ncclComm_t comm, cudaStream_t stream, Kind kind, const void* sendbuff,
                    void* recvbuff, size_t count, ncclDataType_t type, ncclRedOp_t redop = ncclSum, int root = 0) {
  return submit(api, comm, stream, Op{kind, sendbuff, recvbuff, count, type, redop, root});  // Op's fields in order
}

// Queues a group's operations: one task per communicator, so that its sends, receives and collectives
// progress together instead of blocking each other.
ncclResult_t issue_group(const std::vector<Group::Queued>& queued) {
  std::vector<ncclComm*> order;
  std::map<ncclComm*, std::pair<StreamImpl*, std::vector<Op>>> by_comm;
  for (const Group::Queued& q : queued) {
    auto it = by_comm.find(q.comm);
    if (it == by_comm.end()) {
      order.push_back(q.comm);
      by_comm[q.comm] = {q.stream, {q.op}};
    } else if (it->second.first != q.stream) {
      return fail(ncclInvalidUsage, "ncclGroupEnd: the operations of " + describe(q.comm) +
                                        " in this group use several streams (not simulated: use one)");
    } else {
      it->second.second.push_back(q.op);
    }
  }
  for (ncclComm* c : order) issue(c, by_comm[c].first, by_comm[c].second);
  return ncclSuccess;
}

ncclResult_t end_group() {
  Group g = std::move(group);
  group = Group();
  ncclResult_t r = g.error;
  if (r == ncclSuccess && !g.joins.empty() && !g.ops.empty())
    r = fail(ncclInvalidUsage,
             "ncclGroupEnd: a group that creates communicators (ncclCommInitRank, ncclCommSplit) cannot also "
             "hold operations");
  for (const Membership& m : g.joins) {
    const ncclResult_t joined = await(m);
    if (r == ncclSuccess) r = joined;
  }
  if (r == ncclSuccess) r = issue_group(g.ops);
  for (const Group::Queued& q : g.ops) release(q.comm);
  for (ncclComm* c : g.held) release(c);
  return r;
}

const char* result_text(ncclResult_t r) {
  switch (r) {
    case ncclSuccess: return "no error";
    case ncclUnhandledCudaError: return "unhandled cuda error (a CUDA call failed)";
    case ncclSystemError: return "unhandled system error";
    case ncclInternalError: return "internal error";
    case ncclInvalidArgument: return "invalid argument";
    case ncclInvalidUsage: return "invalid usage";
    case ncclRemoteError: return "remote process exited or there was a network error";
    case ncclInProgress: return "NCCL operation in progress";
    default: return "unknown result code";
  }
}

}  // namespace

ncclResult_t fail(ncclResult_t r, const std::string& text) {
  tl_last_error = text;
  return r;
}

const char* last_error() { return tl_last_error.c_str(); }

}  // namespace nccl
}  // namespace cudasim

using cudasim::nccl::fail;
using cudasim::nccl::Kind;
using cudasim::nccl::note;
using cudasim::nccl::Op;

extern "C" {

ncclResult_t ncclGetUniqueId(ncclUniqueId* uniqueId) {
  if (uniqueId == nullptr) return note(fail(ncclInvalidArgument, "ncclGetUniqueId: uniqueId is NULL"));
  cudasim::nccl::new_unique_id(uniqueId);
  return ncclSuccess;
}

ncclResult_t ncclCommInitRank(ncclComm_t* comm, int nranks, ncclUniqueId commId, int rank) {
  if (comm == nullptr) return note(fail(ncclInvalidArgument, "ncclCommInitRank: comm is NULL"));
  if (ncclResult_t r = cudasim::nccl::check_init(nranks, commId, rank)) return note(r);
  const int device = cudasim::current_device();
  if (cudaError_t e = cudasim::check_device(device))
    return note(fail(ncclUnhandledCudaError,
                     "ncclCommInitRank: cuda:" + std::to_string(device) + " cannot be used: " + cudaGetErrorName(e)));
  cudasim::nccl::Membership m;
  if (ncclResult_t r = cudasim::nccl::join_init(comm, nranks, commId, rank, device, &m)) return note(r);
  if (cudasim::nccl::group.depth > 0) {
    cudasim::nccl::group.joins.push_back(m);
    return ncclSuccess;
  }
  return cudasim::nccl::await(m);
}

ncclResult_t ncclCommInitAll(ncclComm_t* comm, int ndev, const int* devlist) {
  if (comm == nullptr) return note(fail(ncclInvalidArgument, "ncclCommInitAll: comm is NULL"));
  if (ndev < 1) return note(fail(ncclInvalidArgument, "ncclCommInitAll: ndev " + std::to_string(ndev) + " < 1"));
  std::vector<int> devices;
  for (int i = 0; i < ndev; ++i) {
    const int d = devlist != nullptr ? devlist[i] : i;
    const cudaError_t e = cudasim::check_device(d);
    if (e == cudaErrorInvalidDevice)
      return note(fail(ncclInvalidArgument, "ncclCommInitAll: device " + std::to_string(d) + " of rank " +
                                                std::to_string(i) + " is not one of the " +
                                                std::to_string(cudasim::device_count()) +
                                                " simulated devices (TANDEM_CUDASIM_DEVICES)"));
    if (e != cudaSuccess)
      return note(fail(ncclUnhandledCudaError,
                       "ncclCommInitAll: cuda:" + std::to_string(d) + " cannot be used: " + cudaGetErrorName(e)));
    devices.push_back(d);
  }
  return note(cudasim::nccl::init_all(comm, devices));
}

ncclResult_t ncclCommDestroy(ncclComm_t comm) { return note(cudasim::nccl::destroy(comm)); }

ncclResult_t ncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t* newcomm, ncclConfig_t* config) {
  if (newcomm == nullptr) return note(fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL"));
  if (color < 0 && color != NCCL_SPLIT_NOCOLOR)
    return note(fail(ncclInvalidArgument,
                     "ncclCommSplit: color " + std::to_string(color) + " is neither >= 0 nor NCCL_SPLIT_NOCOLOR"));
  if (config != nullptr) {
    const ncclConfig_t initialized = NCCL_CONFIG_INITIALIZER;
    if (config->size != initialized.size || config->magic != initialized.magic)
      return note(fail(ncclInvalidArgument, "ncclCommSplit: config was not set up with NCCL_CONFIG_INITIALIZER"));
    if (config->blocking == 0)
      return note(fail(ncclInvalidUsage,
                       "ncclCommSplit: nonblocking communicators (config.blocking = 0) are "
                       "not simulated"));
  }
  if (ncclResult_t r = cudasim::nccl::hold(comm, "ncclCommSplit")) return note(r);
  cudasim::nccl::Membership m;
  ncclResult_t r = cudasim::nccl::join_split(comm, color, key, newcomm, &m);
  if (r == ncclSuccess && cudasim::nccl::group.depth > 0) {
    cudasim::nccl::group.joins.push_back(m);
    cudasim::nccl::group.held.push_back(comm);
    return ncclSuccess;
  }
  if (r == ncclSuccess) r = cudasim::nccl::await(m);
  cudasim::nccl::release(comm);
  return note(r);
}

const char* ncclGetErrorString(ncclResult_t result) { return cudasim::nccl::result_text(result); }

// As in NCCL, the text is not cleared by reading it, and `comm` is not used.
const char* ncclGetLastError(ncclComm_t comm) {
  (void)comm;
  return cudasim::nccl::last_error();
}

ncclResult_t ncclBroadcast(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, int root,
                           ncclComm_t comm, cudaStream_t stream) {
  return cudasim::nccl::submit("ncclBroadcast", comm, stream, Kind::Broadcast, sendbuff, recvbuff, count, datatype,
                               ncclSum, root);
}

ncclResult_t ncclAllReduce(const void* sendbuff, void* recvbuff, size_t count, ncclDataType_t datatype, ncclRedOp_t op,
                           ncclComm_t comm, cudaStream_t stream) {
  return cudasim::nccl::submit("ncclAllReduce", comm, stream, Kind::AllReduce, sendbuff, recvbuff, count, datatype, op);
}

ncclResult_t ncclAllGather(const void* sendbuff, void* recvbuff, size_t sendcount, ncclDataType_t datatype,
                           ncclComm_t comm, cudaStream_t stream) {
  return cudasim::nccl::submit("ncclAllGather", comm, stream, Kind::AllGather, sendbuff, recvbuff, sendcount, datatype);
}

ncclResult_t ncclSend(const void* sendbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return cudasim::nccl::submit("ncclSend", comm, stream, Kind::Send, sendbuff, nullptr, count, datatype, ncclSum, peer);
}

ncclResult_t ncclRecv(void* recvbuff, size_t count, ncclDataType_t datatype, int peer, ncclComm_t comm,
                      cudaStream_t stream) {
  return cudasim::nccl::submit("ncclRecv", comm, stream, Kind::Recv, nullptr, recvbuff, count, datatype, ncclSum, peer);
}

ncclResult_t ncclGroupStart() {
  cudasim::nccl::group.depth++;
  return ncclSuccess;
}

ncclResult_t ncclGroupEnd() {
  if (cudasim::nccl::group.depth == 0) return fail(ncclInvalidUsage, "ncclGroupEnd without a matching ncclGroupStart");
  if (--cudasim::nccl::group.depth > 0) return ncclSuccess;
  return cudasim::nccl::end_group();
}

}  // extern "C"
