// NCCL backend: communicators over GPUs. Operations run on the worker's comm stream, ordered after the
// caller's current stream with events; the caller's stream waits for their results the same way.
#pragma once

#include <memory>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/worker.h"

namespace tandem {
namespace parallel {

// One communicator per worker for workers of this process on distinct GPUs (ncclCommInitAll); rank i is
// workers[i]. NCCL cannot put two ranks on one GPU: SM partitions of a GPU get a ValueError that points to
// make_local_group; CPU workers get a DeviceError.
//
// Semantics next to the local backend: all_reduce and reduce_scatter send chunks point to point and sum them
// with the local backend's rank-order kernel (bitwise equal results); all_gather and broadcast are NCCL's.
// Point-to-point messages between two ranks match in the order they are issued (NCCL has no tags: `tag` is
// checked but not used), a recv whose shape differs from the send is not detected, and a rank cannot send to
// itself. An NCCL send occupies the comm stream until its recv is posted, so a cycle of sends issued before
// their recvs (every rank of a ring sending first) deadlocks: let one rank of a cycle receive first (the
// local backend has no such limit). barrier() orders the streams of all ranks; it does not block the host.
// A communicator is used from one host thread at a time (needs_one_issuer(): executors issue both lanes of
// a worker from one thread, so every rank issues its operations in schedule order).
std::vector<std::shared_ptr<Communicator>> make_nccl_group(const std::vector<Worker>& workers);

// This process's rank of an NCCL communicator over the ranks of `bootstrap` (e.g. the MPI communicator with
// one process per GPU): rank 0 makes the ncclUniqueId and broadcasts it through `bootstrap`. Every rank of
// `bootstrap` calls it at the same time. Two ranks on the same GPU get a ValueError.
std::shared_ptr<Communicator> make_nccl_communicator(const Worker& worker, Communicator& bootstrap);

}  // namespace parallel
}  // namespace tandem
