// Storage allocation: 64-byte aligned host memory from the host cache, pinned host memory, and a stream-ordered CUDA
// pool.
#include "runtime/memory/storage.h"

#include <atomic>
#include <cstring>
#include <functional>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <vector>

#include "runtime/base/config.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/error.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/memory/host_cache.h"
#include "runtime/memory/stream_check.h"

namespace tandem {

namespace {

// One cudaMallocAsync pool per device, with a release threshold high enough that freed memory
// stays cached in the pool instead of going back to the driver at each synchronization.
cudaMemPool_t device_pool(int device) {
  static std::mutex mu;
  static std::vector<cudaMemPool_t> pools;
  std::lock_guard<std::mutex> lock(mu);
  if (pools.size() <= static_cast<size_t>(device)) pools.resize(device + 1, nullptr);
  if (pools[device] == nullptr) {
    cudaMemPool_t pool = nullptr;
    TD_CUDA_CHECK(cudaDeviceGetDefaultMemPool(&pool, device));
    uint64_t threshold = UINT64_MAX;
    TD_CUDA_CHECK(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &threshold));
    pools[device] = pool;
  }
  return pools[device];
}

// Orders `free_stream` after the work queued so far on `user`, a CUDA stream of any device. The event is made
// on the user's device: cudaEventRecord refuses an event of another device (cudaStreamWaitEvent accepts one).
cudaError_t order_after(const Stream& user, const Stream& free_stream) {
  int previous = 0;
  cudaError_t err = cudaGetDevice(&previous);
  if (err != cudaSuccess) return err;
  const int device = user.device().index;
  if (device != previous && (err = cudaSetDevice(device)) != cudaSuccess) return err;
  cudaEvent_t ev = nullptr;
  err = cudaEventCreateWithFlags(&ev, cudaEventDisableTiming);
  if (err == cudaSuccess) err = cudaEventRecord(ev, user.cuda());
  if (err == cudaSuccess) err = cudaStreamWaitEvent(free_stream.cuda(), ev, 0);
  if (ev != nullptr) {
    const cudaError_t destroyed = cudaEventDestroy(ev);
    if (err == cudaSuccess) err = destroyed;
  }
  if (device != previous) {
    const cudaError_t restored = cudaSetDevice(previous);
    if (err == cudaSuccess) err = restored;
  }
  return err;
}
// The streams being captured, with the frees that wait for their capture's end. A free checks `capturing` between
// two changes of `unguarded`, and a capture begins only once no free is between them, so a free either sees the
// capture (and looks its stream up under the lock) or ends before the capture begins.
struct CaptureRegistry {
  std::mutex mu;
  std::atomic<int> capturing{0};
  std::atomic<int> unguarded{0};
  std::map<CUstream_st*, std::vector<std::function<void()>>> waiting;  // per capturing stream
  std::vector<void*> host_waiting;  // pinned host memory: cudaFreeHost synchronizes every device
};

CaptureRegistry& captures() {
  static CaptureRegistry* r = new CaptureRegistry;  // frees may run during static destruction
  return *r;
}

// Frees pinned host memory now, or once no capture is under way (cudaFreeHost synchronizes every device, which
// would invalidate any capture).
void free_host_or_wait(void* data) {
  CaptureRegistry& r = captures();
  r.unguarded.fetch_add(1);
  if (r.capturing.load() == 0) {
    ignore_cuda_error(cudaFreeHost(data), "cudaFreeHost");
    r.unguarded.fetch_sub(1);
    return;
  }
  r.unguarded.fetch_sub(1);
  std::lock_guard<std::mutex> lock(r.mu);
  if (r.capturing.load() > 0)
    r.host_waiting.push_back(data);
  else
    ignore_cuda_error(cudaFreeHost(data), "cudaFreeHost");
}

}  // namespace

void capture_beginning(const Stream& stream) {
  CaptureRegistry& r = captures();
  std::lock_guard<std::mutex> lock(r.mu);
  r.waiting[stream.cuda()];
  r.capturing.fetch_add(1);
  while (r.unguarded.load() != 0) std::this_thread::yield();
}

struct Storage::Impl {
  void* data = nullptr;
  size_t nbytes = 0;
  size_t block_bytes = 0;  // CPU: the host cache's block size
  Device device;
  bool pinned = false;
  bool cuda_host = false;  // allocated by cudaHostAlloc
  MemoryCategory category = MemoryCategory::Activations;
  std::vector<std::shared_ptr<MemoryTracker>> scopes;  // charged besides the device tracker
  Stream stream;                                       // allocation (and free) stream
  std::vector<Stream> used_on;                         // other streams that used it
  std::atomic<uint64_t> version{0};
  uint64_t check_id = 0;    // the stream checker's allocation id (0: unchecked)
  uint64_t capture_id = 0;  // the CUDA graph capture it was allocated in (graph memory), 0 for none
  std::mutex mu;

  ~Impl() {
    if (check_id != 0) stream_check::on_free(check_id, stream, used_on);
    if (nbytes > 0) {
      device_memory(device).on_free(category, static_cast<int64_t>(nbytes));
      for (auto& t : scopes) t->on_free(category, static_cast<int64_t>(nbytes));
    }
    if (data == nullptr) return;
    if (device.is_cpu()) {
      if (cuda_host)
        free_host_or_wait(data);
      else
        host_cache::release(data, block_bytes);
      return;
    }
    GraphCapture* c = active_capture();
    if (c != nullptr && c->id() == capture_id) {
      c->note_free(nbytes);  // a free node of the graph
      free_device(data, stream, used_on);
      return;
    }
    if (c != nullptr && c->stream().device() == device) {
      // Memory from before the capture: a free node may free only the graph's own memory, and the graph may use
      // this memory at every replay. The capture fails, and the memory is freed once it has ended.
      std::ostringstream what;
      what << nbytes << " bytes of " << category_name(category) << " on " << device;
      c->defer_free(what.str(),
                    [data = data, stream = stream, used_on = used_on] { free_or_wait(data, stream, used_on); });
      return;
    }
    free_or_wait(data, stream, used_on);
  }

  // Frees now, or at the end of a capture (by another thread) of a stream the free would queue work on.
  static void free_or_wait(void* data, const Stream& stream, const std::vector<Stream>& used_on) {
    CaptureRegistry& r = captures();
    r.unguarded.fetch_add(1);
    if (r.capturing.load() == 0) {
      free_device(data, stream, used_on);
      r.unguarded.fetch_sub(1);
      return;
    }
    r.unguarded.fetch_sub(1);
    std::lock_guard<std::mutex> lock(r.mu);
    auto waiting_for = [&](const Stream& s) {
      auto it = r.waiting.find(s.cuda());
      return it == r.waiting.end() ? nullptr : &it->second;
    };
    std::vector<std::function<void()>>* wait = waiting_for(stream);
    for (size_t i = 0; wait == nullptr && i < used_on.size(); ++i) wait = waiting_for(used_on[i]);
    if (wait != nullptr) {
      wait->push_back([data, stream, used_on] { free_or_wait(data, stream, used_on); });
      return;
    }
    free_device(data, stream, used_on);  // under the lock: no capture begins on these streams meanwhile
  }

  // The free is ordered after all work queued so far on every stream that used the memory.
  static void free_device(void* data, const Stream& stream, const std::vector<Stream>& used_on) {
    for (const Stream& s : used_on)
      ignore_cuda_error(order_after(s, stream), "ordering a free after a stream that used the memory");
    ignore_cuda_error(cudaFreeAsync(data, stream.cuda()), "cudaFreeAsync");
  }
};

void capture_ended(const Stream& stream) {
  CaptureRegistry& r = captures();
  std::vector<std::function<void()>> frees;
  std::vector<void*> host;
  {
    std::lock_guard<std::mutex> lock(r.mu);
    auto it = r.waiting.find(stream.cuda());
    if (it == r.waiting.end()) return;
    frees = std::move(it->second);
    r.waiting.erase(it);
    if (r.capturing.fetch_sub(1) == 1) host.swap(r.host_waiting);
  }
  for (auto& free : frees) free();
  for (void* h : host) free_host_or_wait(h);
}

Storage Storage::allocate(size_t nbytes, Device device, const Stream& stream, bool pinned) {
  auto impl = std::make_shared<Impl>();
  impl->device = device;
  impl->nbytes = nbytes;
  impl->category = current_memory_category();
  impl->stream = stream;
  if (device.is_cpu()) {
    if (nbytes > 0) {
      if (pinned && cuda_available()) {
        TD_CUDA_CHECK(cudaHostAlloc(&impl->data, nbytes, cudaHostAllocPortable));
        impl->cuda_host = true;
        impl->pinned = true;
      } else {
        impl->data = host_cache::allocate(nbytes, &impl->block_bytes);
      }
      if (fill_fresh_host_memory()) std::memset(impl->data, 0xff, nbytes);
    }
  } else {
    check_device_available(device);
    TD_CHECK_DEVICE(stream.device() == device, "allocation on ", device, " ordered on a stream of ", stream.device());
    GraphCapture* c = active_capture();
    if (c != nullptr && c->stream().device() == device && nbytes > 0) {
      // In a capture the allocation is an allocation node: its stream must be part of the capture.
      cudaStreamCaptureStatus status = cudaStreamCaptureStatusNone;
      TD_CUDA_CHECK(cudaStreamIsCapturing(stream.cuda(), &status));
      TD_CHECK_T(GraphCaptureError, status == cudaStreamCaptureStatusActive, "an allocation of ", nbytes,
                 " bytes on stream ", stream.id(), " of ", device, " during the capture of a CUDA graph on stream ",
                 c->stream().id(), ", which that stream is not part of: it would be allocated once, now, and not by ",
                 "the graph (allocate on the capturing stream, or make the stream wait for an event recorded on it)");
    }
    if (nbytes > 0) {
      cudaError_t err = cudaMallocFromPoolAsync(&impl->data, nbytes, device_pool(device.index), stream.cuda());
      if (err == cudaErrorMemoryAllocation) {
        // Give back what the pool keeps of frees that have run (other streams' frees become reusable only
        // then), and try once more.
        cudaGetLastError();
        release_cached_memory(device);
        err = cudaMallocFromPoolAsync(&impl->data, nbytes, device_pool(device.index), stream.cuda());
      }
      if (err == cudaErrorMemoryAllocation) {
        cudaGetLastError();
        auto c = device_memory(device).counters();
        TD_THROW(BackendError, "out of memory on ", device, " allocating ", nbytes, " bytes (", c.total_current,
                 " bytes in use by Tandem)");
      }
      TD_CUDA_CHECK(err);
      if (c != nullptr && c->stream().device() == device) {
        impl->capture_id = c->id();
        c->note_allocation(nbytes);
      }
    }
  }
  if (stream_check::enabled())
    impl->check_id = stream_check::on_allocate(impl->data, nbytes, device, impl->category, stream);
  if (nbytes > 0) {
    device_memory(device).on_alloc(impl->category, static_cast<int64_t>(nbytes));
    impl->scopes = current_memory_scopes();
    for (auto& t : impl->scopes) t->on_alloc(impl->category, static_cast<int64_t>(nbytes));
  }
  Storage s;
  s.impl_ = std::move(impl);
  return s;
}

void release_cached_memory(Device device) {
  if (device.is_cpu()) {
    host_cache::trim();
    return;
  }
  // No synchronization: it could wait for streams that wait for this thread (a collective in flight).
  TD_CUDA_CHECK(cudaMemPoolTrimTo(device_pool(device.index), 0));
}

void* Storage::data() const { return impl_ ? impl_->data : nullptr; }
size_t Storage::nbytes() const { return impl_ ? impl_->nbytes : 0; }
Device Storage::device() const { return impl_ ? impl_->device : Device::cpu(); }
bool Storage::pinned() const { return impl_ && impl_->pinned; }
MemoryCategory Storage::category() const { return impl_ ? impl_->category : MemoryCategory::Activations; }

void Storage::set_category(MemoryCategory c) const {
  if (!impl_ || impl_->category == c) return;
  std::lock_guard<std::mutex> lock(impl_->mu);
  auto n = static_cast<int64_t>(impl_->nbytes);
  if (n > 0) {
    device_memory(impl_->device).on_move(impl_->category, c, n);
    for (auto& t : impl_->scopes) t->on_move(impl_->category, c, n);
  }
  impl_->category = c;
  if (impl_->check_id != 0) stream_check::on_set_category(impl_->check_id, c);
}

void Storage::record_stream(const Stream& stream) const {
  // On the CPU the free does not wait, but the stream checker holds it to the same pledge as on a GPU.
  if (!impl_ || stream == impl_->stream) return;
  TD_CHECK_DEVICE(impl_->device.is_cpu() || stream.device().is_cuda(), "record_stream: memory of ", impl_->device,
                  " cannot be used on a CPU stream, which orders nothing on the GPU (its free could not wait for it)");
  std::lock_guard<std::mutex> lock(impl_->mu);
  for (const Stream& s : impl_->used_on)
    if (s == stream) return;
  impl_->used_on.push_back(stream);
}

uint64_t Storage::version() const { return impl_ ? impl_->version.load() : 0; }
void Storage::bump_version() const {
  if (impl_) impl_->version.fetch_add(1);
}

}  // namespace tandem
