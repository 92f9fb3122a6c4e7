// MPI backend: CPU tensors across the processes of an MPI job (launched by mpirun or srun), with the local
// backend's chunking and rank-order sum, so its collectives give bitwise the local backend's results.
#pragma once

#include <memory>

#include "parallel/communicator.h"

namespace tandem {
namespace parallel {

struct Worker;

// This process's communicator over a duplicate of MPI_COMM_WORLD. The first call initializes MPI (asking for
// MPI_THREAD_MULTIPLE; with less, calls are serialized by a lock) unless the program did, and then finalizes
// it at exit. Tensors must be on the CPU (DeviceError otherwise: use the NCCL backend for GPUs). Shapes are
// checked across ranks: a recv or collective whose shape differs from its peers' throws on every rank.
std::shared_ptr<Communicator> make_mpi_communicator();

// NCCL over the processes of the MPI job, one GPU per process (the worker's), the ncclUniqueId broadcast by
// MPI (see make_nccl_communicator in nccl_comm.h).
std::shared_ptr<Communicator> make_nccl_communicator_mpi(const Worker& worker);

}  // namespace parallel
}  // namespace tandem
