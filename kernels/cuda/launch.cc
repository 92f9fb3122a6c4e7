// Host-side launch helpers of the CUDA backend.
#include "kernels/cuda/launch.h"

#include <algorithm>
#include <mutex>
#include <set>
#include <vector>

#include "kernels/cuda/kernel_registry.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/error.h"
#include "runtime/base/lru_cache.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/memory/cuda_thread.h"
#include "runtime/memory/memory.h"

namespace tandem {
namespace cuda {

namespace {
Device checked_cuda_device(const Stream& s) {
  TD_CHECK_DEVICE(s.device().is_cuda(), "a CUDA kernel was given a stream of ", s.device());
  TD_CHECK_DEVICE(s.cuda() != nullptr, "a CUDA kernel was given the legacy default stream of ", s.device(),
                  "; Tandem queues work on explicit streams only");
  return s.device();
}
}  // namespace

LaunchScope::LaunchScope(const Stream& s)
    : guard_(checked_cuda_device(s)), stream_(s.cuda()), device_(s.device().index) {}

int sm_count(int device) {
  static std::mutex mu;
  static std::vector<int> counts;
  std::lock_guard<std::mutex> lock(mu);
  if (counts.size() <= static_cast<size_t>(device)) counts.resize(device + 1, 0);
  if (counts[device] == 0)
    TD_CUDA_CHECK(cudaDeviceGetAttribute(&counts[device], cudaDevAttrMultiProcessorCount, device));
  return counts[device];
}

unsigned grid_for(int64_t blocks, int device) {
  int64_t resident = static_cast<int64_t>(sm_count(device)) * kBlocksPerSm;
  return static_cast<unsigned>(std::max<int64_t>(1, std::min(blocks, resident)));
}

bool fits_int32(int64_t numel, const StridedDesc* const* descs, int k) {
  constexpr int64_t kMax = (int64_t{1} << 31) - 1;
  if (numel > kMax) return false;
  for (int i = 0; i < k; ++i) {
    int64_t last = 0;
    for (int d = 0; d < descs[i]->ndim; ++d) {
      if (descs[i]->strides[d] < 0) return false;
      last += (descs[i]->shape[d] - 1) * descs[i]->strides[d];
      if (last > kMax) return false;
    }
  }
  return true;
}

namespace {
// A thread's setup step (prepare_cuda_thread): loads every registered kernel on the device once per process.
// cudaFuncGetAttributes reports attributes that only a loaded function has (maxThreadsPerBlock), so the runtime
// loads the kernel for it, as its first launch would.
void load_kernels(int device) {
  static std::mutex mu;  // held while loading: another thread's setup returns only once the kernels are loaded
  static std::set<int> loaded;
  std::lock_guard<std::mutex> lock(mu);
  if (loaded.count(device) != 0) return;
  for (const void* fn : registered_kernels()) {
    cudaFuncAttributes attributes;
    TD_CUDA_CHECK(cudaFuncGetAttributes(&attributes, fn));
  }
  loaded.insert(device);
}

const bool registered_load = [] {
  register_cuda_thread_setup(load_kernels);
  return true;
}();
}  // namespace

Storage scratch(size_t nbytes, const Stream& s) {
  MemoryCategoryGuard category(MemoryCategory::Workspace);
  return Storage::allocate(nbytes, s.device(), s);
}

Storage workspace(size_t nbytes, const Stream& s) {
  thread_local LruCache<uint64_t, Storage> buffers(kWorkspaceStreams);  // by stream id
  if (nbytes == 0) return Storage();
  // During a capture the cache is left alone: its buffers lie outside the graph's memory, so a replay would use one
  // the eager work may since have grown (freed), and growing one in the capture would free it there. The graph gets
  // a buffer of its own, freed inside it.
  if (active_capture() != nullptr) return scratch(nbytes, s);
  Storage* held = buffers.find(s.id());
  if (held != nullptr && held->use_count() > 1) return scratch(nbytes, s);  // lent to an op still running
  if (held != nullptr && held->nbytes() >= nbytes) return *held;
  if (held != nullptr) *held = Storage();  // freed first, so that the pool may reuse its memory for the larger one
  return buffers.put(s.id(), scratch(nbytes, s));
}

}  // namespace cuda
}  // namespace tandem
