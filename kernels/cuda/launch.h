// Host-side helpers of the CUDA backend: the launch scope, grid sizing, dim collapsing, index width choice
// and scratch memory from the caching pool.
#pragma once

#include <cuda_runtime_api.h>

#include <array>
#include <cstdint>

#include "kernels/strided.h"
#include "runtime/memory/storage.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/backend.h"

namespace tandem {
namespace cuda {

// Threads per block of the 1-D kernels; 8 such blocks fill an SM of an A100 or H100 (2048 threads).
constexpr int kThreads = 256;
constexpr int kBlocksPerSm = 2048 / kThreads;

// Entered by every backend method: checks that `s` is a CUDA stream (never the legacy default stream)
// and makes its device the CUDA runtime's current device while in scope.
class LaunchScope {
 public:
  explicit LaunchScope(const Stream& s);
  cudaStream_t stream() const { return stream_; }
  int device() const { return device_; }

 private:
  DeviceGuard guard_;
  cudaStream_t stream_;
  int device_;
};

// Number of SMs of CUDA device `device` (queried once).
int sm_count(int device);
// Blocks for a grid-stride loop that needs `blocks` blocks of kThreads: at most what is resident at once.
unsigned grid_for(int64_t blocks, int device);
inline int64_t ceil_div(int64_t a, int64_t b) { return (a + b - 1) / b; }

inline bool is_aligned(const void* p, size_t bytes) { return reinterpret_cast<uintptr_t>(p) % bytes == 0; }

// The K descriptors (same shape) with size-1 dims dropped and dims that are contiguous for every operand
// merged, so that kernels do as little index arithmetic as possible. ndim >= 1 in the result.
template <int K>
std::array<StridedDesc, K> collapse(const std::array<const StridedDesc*, K>& descs) {
  strided::StridedIter<K> it = strided::make_iter<K>(descs);
  std::array<StridedDesc, K> out;
  for (int k = 0; k < K; ++k) {
    out[k].ndim = it.ndim;
    for (int d = 0; d < it.ndim; ++d) {
      out[k].shape[d] = it.shape[d];
      out[k].strides[d] = it.strides[k][d];
    }
  }
  return out;
}

// Whether 32-bit index arithmetic is exact for `numel` elements over these operands (strides >= 0 and
// every offset below 2^31); the kernels then divide in 32 bits, much cheaper than in 64.
bool fits_int32(int64_t numel, const StridedDesc* const* descs, int k);

// Device scratch memory ordered on `s`, charged to the Workspace category; freed (stream-ordered) with
// the returned Storage, so it can be dropped right after the kernels that use it are queued.
Storage scratch(size_t nbytes, const Stream& s);

// Workspace for the kernels or library calls an op queues on `s`, to be dropped once they are queued: the
// calling thread's cached buffer of that stream, grown (freed in stream order and allocated anew) when smaller
// than nbytes, so that a steady state allocates none. Work queued on `s` runs in stream order, so successive ops
// share it safely; while an earlier Storage of it is still held (a workspace inside another) the call gets
// scratch() instead. A thread keeps buffers for its kWorkspaceStreams most recently used streams (the others
// are freed), each until the thread exits: held memory of the Workspace category, charged to the memory scopes
// active when it grew. During the capture of a CUDA graph it is scratch(): the graph's own memory.
Storage workspace(size_t nbytes, const Stream& s);
constexpr size_t kWorkspaceStreams = 8;

}  // namespace cuda
}  // namespace tandem
