// Simulated device memory: cudaMalloc, stream-ordered pools, pinned host memory, copies and access rules.
// Every allocation is plain host memory (so AddressSanitizer sees its bounds), registered with its device;
// fresh memory is filled with NaN bytes so that reads of uninitialized memory show.
#include <cuda_runtime_api.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <sstream>

#include "tools/cudasim/capture.h"
#include "tools/cudasim/counters.h"
#include "tools/cudasim/sim.h"
#include "tools/cudasim/state.h"

#if defined(__has_feature)
#if __has_feature(address_sanitizer)
#define CUDASIM_ASAN 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__)
#define CUDASIM_ASAN 1
#endif
#if defined(CUDASIM_ASAN)
#include <sanitizer/asan_interface.h>
#define POISON(p, n) __asan_poison_memory_region((p), (n))
#define UNPOISON(p, n) __asan_unpoison_memory_region((p), (n))
#else
#define POISON(p, n) ((void)(p), (void)(n))
#define UNPOISON(p, n) ((void)(p), (void)(n))
#endif

// A stream-ordered memory pool (cudaMemPool_t points to one).
struct CUmemPoolHandle_st {
  int device = 0;
  uint64_t release_threshold = 0;
  std::set<int> access;  // other devices given read-write access (cudaMemPoolSetAccess)
  // Freed blocks kept for reuse. A block freed on stream S may be handed to a later allocation on S at once
  // (stream order puts the free first), and to any stream once the free has run (opportunistic reuse).
  struct Cached {
    char* base;
    size_t capacity;
    uint64_t freed_on;  // stream id
    std::shared_ptr<bool> free_ran;
  };
  std::vector<Cached> cached;
};

namespace cudasim {

struct PoolState : CUmemPoolHandle_st {};

// One pool block's allocations, for the check that queued work touches the block only between the stream-ordered
// allocation it was given and that allocation's free (AddressSanitizer's poisoning sees the same misuse, but only
// in its build and only when the bytes touched happen to be poisoned). Guarded by mu.
struct BlockLife {
  // Host order: the block's current allocation (numbered from 1), its streams, and whether it was freed.
  uint64_t allocation = 0;
  uint64_t alloc_stream = 0, free_stream = 0;
  bool freed = false;
  // Device order: the last of the block's stream-ordered allocations and frees that ran.
  uint64_t ran = 0;  // its allocation number (0: none ran yet)
  bool ran_free = false;
  uint64_t ran_stream = 0;
};

namespace {

constexpr size_t kAlignment = 256;        // cudaMalloc's alignment
constexpr unsigned char kNanByte = 0xff;  // 0xff.. is a NaN as f16, bf16, f32 and f64

struct Region {
  Allocation a;
  size_t capacity = 0;  // bytes really held (>= a.bytes)
  PoolState* pool = nullptr;
  std::shared_ptr<BlockLife> life;  // pool blocks only
  const void* graph = nullptr;      // the graph whose allocation node made it (graph memory)
  bool freed_in_graph = false;      // a free node of that graph frees it
};

// Blocks a graph's free nodes freed during its capture: later allocation nodes on the same stream reuse them (the
// free precedes them in the graph), as CUDA reuses graph memory.
struct GraphCached {
  const void* graph;
  char* base;
  size_t capacity;
  uint64_t freed_on;
};
std::vector<GraphCached>& graph_cached() {
  static auto* v = new std::vector<GraphCached>();
  return *v;
}

std::mutex mu;  // guards the registry, the pools and every device's `reserved`
std::map<uintptr_t, Region>& regions() {
  static auto* m = new std::map<uintptr_t, Region>();
  return *m;
}
std::atomic<uint64_t> pageable_copies{0};

size_t round_up(size_t n, size_t a) { return (n + a - 1) / a * a; }

// The region containing p (caller holds mu).
const Region* region_of(const void* p) {
  auto& r = regions();
  auto it = r.upper_bound(reinterpret_cast<uintptr_t>(p));
  if (it == r.begin()) return nullptr;
  --it;
  const Region& g = it->second;
  if (reinterpret_cast<uintptr_t>(p) >= it->first + std::max<size_t>(g.capacity, 1)) return nullptr;
  return &g;
}

std::string hex(const void* p) {
  std::ostringstream os;
  os << p;
  return os.str();
}

std::string where(const Region& g) {
  if (g.a.kind == MemoryKind::PinnedHost) return "pinned host memory";
  return std::string(g.a.kind == MemoryKind::Pool ? "pool memory (cudaMallocAsync)" : "cudaMalloc memory") +
         " of cuda:" + std::to_string(g.a.device);
}

// Notes that queued work touches p in region g (once per block). Caller holds mu.
void add_use(const Region& g, const void* p, std::vector<PoolUse>* uses) {
  if (uses == nullptr || !g.life) return;
  for (const PoolUse& u : *uses)
    if (u.life == g.life) return;
  PoolUse u;
  u.life = g.life;
  u.allocation = g.life->allocation;
  u.ptr = p;
  u.base = g.a.base;
  u.bytes = g.a.bytes;
  u.device = g.a.device;
  u.alloc_stream = g.life->alloc_stream;
  u.free_stream = g.life->free_stream;
  u.freed = g.life->freed;
  uses->push_back(std::move(u));
}

std::vector<PoolUse> uses_of(std::initializer_list<const void*> ptrs) {
  std::vector<PoolUse> uses;
  std::lock_guard<std::mutex> lock(mu);
  for (const void* p : ptrs)
    if (const Region* g = region_of(p)) add_use(*g, p, &uses);
  return uses;
}

// What is wrong with work on stream `sid` of `device` touching u now ("" if nothing). Caller holds mu.
std::string use_problem(const PoolUse& u, uint64_t sid, int device) {
  const BlockLife& life = *u.life;
  const std::string on = "stream " + std::to_string(sid) + " of cuda:" + std::to_string(device);
  const std::string alloc = "stream " + std::to_string(u.alloc_stream);
  std::ostringstream os;
  os << "on " << on << " touches " << u.ptr << " in pool block " << static_cast<const void*>(u.base) << " (" << u.bytes
     << " bytes of cuda:" << u.device << ", cudaMallocAsync on " << alloc << ")";
  if (u.freed) {
    os << ", which cudaFreeAsync on stream " << u.free_stream << " freed before this work was queued (a use after "
       << "free)";
    if (u.parameter_word)
      os << " [the address is a word of the kernel's parameters; the simulator takes every pointer-sized word "
         << "for a pointer: if the kernel has no such pointer, it is padding or an unused slot to zero]";
  } else if (life.ran < u.allocation) {
    os << " before that allocation ran on " << alloc << ": nothing orders this work after the cudaMallocAsync "
       << "(record an event on " << alloc << " after it and make " << on << " wait for the event)";
  } else if (life.ran == u.allocation && life.ran_free) {
    os << " after its cudaFreeAsync on stream " << life.ran_stream << " ran: nothing orders the free after this "
       << "work (record an event on " << on << " after it and make stream " << life.ran_stream
       << " wait for the event before the free; in Tandem, Storage::record_stream)";
  } else if (life.ran > u.allocation) {
    os << " after the block was freed and allocated again (a " << (life.ran_free ? "cudaFreeAsync" : "cudaMallocAsync")
       << " of a later allocation ran on stream " << life.ran_stream << "): nothing orders the free after this work";
  } else {
    return "";
  }
  return os.str();
}

// Queues `work` on s, checked before and after it runs against the pool blocks it touches (check_pool_uses).
void enqueue_using(StreamImpl* s, const std::string& what, std::vector<PoolUse> uses, std::function<void()> work) {
  if (uses.empty()) return enqueue(s, what, std::move(work));
  enqueue(s, what, [s, what, uses = std::move(uses), work = std::move(work)] {
    check_pool_uses(uses, s, what);
    work();
    check_pool_uses(uses, s, what);
  });
}

// The reason `device` may not touch region g ("" when it may). Caller holds mu.
std::string access_denied(int device, const Region& g) {
  if (g.a.kind == MemoryKind::PinnedHost || g.a.device == device) return "";
  if (g.a.kind == MemoryKind::Device) {
    DeviceState& d = device_state(device);
    std::lock_guard<std::mutex> lock(d.mu);
    if (d.peers.count(g.a.device) != 0) return "";
    return "cuda:" + std::to_string(device) + " has no peer access to cuda:" + std::to_string(g.a.device) +
           " (cudaDeviceEnablePeerAccess)";
  }
  if (g.pool != nullptr && g.pool->access.count(device) != 0) return "";
  return "cuda:" + std::to_string(device) +
         " was given no access to the memory pool of cuda:" + std::to_string(g.a.device) +
         " (cudaMemPoolSetAccess; peer access does not cover pool memory)";
}

bool reserve_locked(int device, size_t bytes) {
  DeviceState& d = device_state(device);
  if (d.reserved + bytes > config().memory_bytes) return false;
  d.reserved += bytes;
  return true;
}

char* fresh(size_t capacity) {
  void* p = std::aligned_alloc(kAlignment, capacity);
  return static_cast<char*>(p);
}

void release(char* base, size_t capacity, int device) {
  UNPOISON(base, capacity);
  std::free(base);
  device_state(device).reserved -= capacity;
}

// Returns cached blocks whose free has run, until the pool holds at most `keep` cached bytes or
// `need` bytes fit under the device's limit. Caller holds mu.
void trim(PoolState& pool, size_t keep, size_t need) {
  size_t held = 0;
  for (auto& c : pool.cached) held += c.capacity;
  DeviceState& d = device_state(pool.device);
  for (auto it = pool.cached.begin(); it != pool.cached.end();) {
    const bool over_keep = held > keep;
    const bool need_room = need > 0 && d.reserved + need > config().memory_bytes;
    if (!over_keep && !need_room) break;
    if (!*it->free_ran) {
      ++it;
      continue;
    }
    held -= it->capacity;
    counters::allocation_changed(it->base, it->capacity, false);
    regions().erase(reinterpret_cast<uintptr_t>(it->base));
    release(it->base, it->capacity, pool.device);
    it = pool.cached.erase(it);
  }
}

PoolState& default_pool(int device) {
  DeviceState& d = device_state(device);
  if (d.default_pool == nullptr) {
    d.default_pool = new PoolState();
    d.default_pool->device = device;
  }
  return *d.default_pool;
}

PoolState* pool_of(cudaMemPool_t handle) {
  std::lock_guard<std::mutex> lock(mu);
  for (int d = 0; d < device_count(); ++d)
    if (&default_pool(d) == handle) return &default_pool(d);
  return nullptr;
}

// Stream-ordered allocation from `pool` for work on stream s.
cudaError_t pool_alloc(void** out, size_t bytes, PoolState& pool, CUstream_st* s) {
  if (out == nullptr) return set_error(cudaErrorInvalidValue);
  if (bytes == 0) {
    *out = nullptr;
    return cudaSuccess;
  }
  char* base = nullptr;
  size_t capacity = round_up(bytes, 512);
  // In a capture: an allocation node, whose block the graph owns (fixed address, reused by every launch).
  const void* graph = capture_graph(s);
  bool growth = false;
  {
    std::lock_guard<std::mutex> lock(mu);
    if (graph != nullptr) {
      auto& gc = graph_cached();
      auto best = gc.end();
      for (auto it = gc.begin(); it != gc.end(); ++it) {
        if (it->graph != graph || it->freed_on != s->id || it->capacity < capacity || it->capacity > 2 * capacity)
          continue;
        if (best == gc.end() || it->capacity < best->capacity) best = it;
      }
      if (best != gc.end()) {
        base = best->base;
        capacity = best->capacity;
        gc.erase(best);
      }
    } else {
      // Reuse: a block freed on this stream (stream order), else one whose free has run; best fit.
      auto best = pool.cached.end();
      for (auto it = pool.cached.begin(); it != pool.cached.end(); ++it) {
        if (it->capacity < capacity || it->capacity > 2 * capacity) continue;
        if (it->freed_on != s->id && !*it->free_ran) continue;
        if (best == pool.cached.end() || it->capacity < best->capacity) best = it;
      }
      if (best != pool.cached.end()) {
        base = best->base;
        capacity = best->capacity;
        pool.cached.erase(best);
      }
    }
    if (base == nullptr) {
      growth = true;
      if (!reserve_locked(pool.device, capacity)) {
        trim(pool, 0, capacity);
        if (!reserve_locked(pool.device, capacity)) {
          std::ostringstream os;
          os << "cudaMallocAsync of " << bytes << " bytes on cuda:" << pool.device << ": "
             << device_state(pool.device).reserved << " of " << config().memory_bytes
             << " bytes are held (TANDEM_CUDASIM_MEMORY_MB)";
          return set_error(cudaErrorMemoryAllocation, os.str());
        }
      }
      base = fresh(capacity);
      POISON(base, capacity);
    }
    Region g;
    g.a = Allocation{base, bytes, pool.device, MemoryKind::Pool};
    g.capacity = capacity;
    g.pool = &pool;
    g.graph = graph;
    if (graph != nullptr) note_graph_allocation(graph, base);
    Region& slot = regions()[reinterpret_cast<uintptr_t>(base)];
    g.life = slot.life ? slot.life : std::make_shared<BlockLife>();
    slot = g;
    counters::allocation_changed(base, capacity, true);
    BlockLife& life = *g.life;
    const uint64_t number = ++life.allocation;
    life.alloc_stream = s->id;
    life.freed = false;
    // In stream order (after a free of the same block on this stream): the new bytes become addressable and
    // read as NaN until written. Queued before mu is released, as a free's task is: a block's allocations and
    // frees enter their streams in the order the registry saw them, whichever host threads issue them.
    // Named with its size and address: a graph's allocation node keeps them (cudaGraphExecUpdate compares them).
    std::ostringstream what;
    what << "cudaMallocAsync of " << bytes << " bytes at " << static_cast<const void*>(base);
    enqueue(s, what.str(), [base, bytes, capacity, life = g.life, number, sid = s->id] {
      UNPOISON(base, bytes);
      std::memset(base, kNanByte, bytes);
      if (capacity > bytes) POISON(base + bytes, capacity - bytes);
      std::lock_guard<std::mutex> lock(mu);
      life->ran = number;
      life->ran_free = false;
      life->ran_stream = sid;
    });
  }
  count_call(growth ? "pool growth" : "pool reuse");
  *out = base;
  return cudaSuccess;
}

enum class Side { Device, PinnedHost, Pageable };

Side side_of(const void* p, Region* out) {
  std::lock_guard<std::mutex> lock(mu);
  const Region* g = region_of(p);
  if (g == nullptr) return Side::Pageable;
  *out = *g;
  return g->a.kind == MemoryKind::PinnedHost ? Side::PinnedHost : Side::Device;
}

// Checks that [p, p + n) lies inside one allocation of the expected side; returns "" or the problem.
std::string check_range(const void* p, size_t n, Side side, const Region& g, const char* name) {
  if (side == Side::Pageable) return "";
  const char* begin = static_cast<const char*>(p);
  if (begin + n > g.a.base + g.a.bytes) {
    std::ostringstream os;
    os << name << " " << p << ": " << n << " bytes from offset " << (begin - g.a.base) << " overrun its allocation of "
       << g.a.bytes << " bytes (" << where(g) << ")";
    return os.str();
  }
  return "";
}

cudaError_t copy_async(void* dst, const void* src, size_t n, cudaMemcpyKind kind, CUstream_st* s, const char* api) {
  if (n == 0) return cudaSuccess;
  if (dst == nullptr || src == nullptr) return set_error(cudaErrorInvalidValue, std::string(api) + ": null pointer");
  Region gd, gs;
  const Side ds = side_of(dst, &gd), ss = side_of(src, &gs);
  const bool dst_dev = ds == Side::Device, src_dev = ss == Side::Device;
  bool ok = true;
  switch (kind) {
    case cudaMemcpyHostToDevice: ok = dst_dev && !src_dev; break;
    case cudaMemcpyDeviceToHost: ok = src_dev && !dst_dev; break;
    case cudaMemcpyDeviceToDevice: ok = dst_dev && src_dev; break;
    case cudaMemcpyHostToHost: ok = !dst_dev && !src_dev; break;
    case cudaMemcpyDefault: break;
    default: return set_error(cudaErrorInvalidMemcpyDirection);
  }
  if (!ok) {
    std::string text = std::string(api) + ": the pointers do not match the copy kind " + std::to_string(kind) +
                       " (destination is " + (dst_dev ? where(gd) : "host memory") + ", source is " +
                       (src_dev ? where(gs) : "host memory") + ")";
    return set_error(cudaErrorInvalidValue, text);
  }
  std::string bad = check_range(dst, n, ds, gd, "destination");
  if (bad.empty()) bad = check_range(src, n, ss, gs, "source");
  if (!bad.empty()) return set_error(cudaErrorInvalidValue, std::string(api) + ": " + bad);
  if (ss == Side::Pageable && dst_dev) {
    // From pageable memory: staged at once, and the call returns only when the copy has run (the host
    // thread stalls, as a GPU's staging does).
    pageable_copies++;
    auto staged = std::make_shared<std::vector<char>>(static_cast<const char*>(src), static_cast<const char*>(src) + n);
    enqueue_using(s, api, uses_of({dst}), [dst, staged] { std::memcpy(dst, staged->data(), staged->size()); });
    return set_error(synchronize(s));
  }
  const char* direction = dst_dev && src_dev ? "copy_d2d" : dst_dev ? "copy_h2d" : src_dev ? "copy_d2h" : "copy_h2h";
  const int counting = counters::mode();
  const TandemCudasimOp op = counters::library_op(TANDEM_CUDASIM_COPY, s->device, s->id, api, direction, direction, "",
                                                  0, static_cast<double>(n), static_cast<double>(n));
  enqueue_using(s, api, uses_of({dst, src}), [dst, src, n, counting, op] {
    std::memmove(dst, src, n);
    if (counters::records(counting)) counters::record(op);
  });
  if (ds == Side::Pageable && src_dev) {
    pageable_copies++;
    return set_error(synchronize(s));
  }
  return cudaSuccess;
}

}  // namespace

void visit_allocations(const std::function<void()>& first, const std::function<void(const void*, size_t)>& fn) {
  std::lock_guard<std::mutex> lock(mu);
  first();
  for (const auto& [base, g] : regions()) fn(g.a.base, g.capacity);
}

bool find_allocation(const void* p, Allocation* out) {
  std::lock_guard<std::mutex> lock(mu);
  const Region* g = region_of(p);
  if (g == nullptr) return false;
  if (out != nullptr) *out = g->a;
  return true;
}

std::string access_problem(int device, const void* p, size_t bytes, const std::string& what) {
  std::lock_guard<std::mutex> lock(mu);
  const Region* g = region_of(p);
  if (g == nullptr) return what + ": address " + hex(p) + " is not device memory";
  const char* begin = static_cast<const char*>(p);
  if (begin + bytes > g->a.base + g->a.bytes) {
    std::ostringstream os;
    os << what << ": " << bytes << " bytes at offset " << (begin - g->a.base) << " overrun an allocation of "
       << g->a.bytes << " bytes (" << where(*g) << ")";
    return os.str();
  }
  std::string denied = access_denied(device, *g);
  if (!denied.empty()) return what + " on cuda:" + std::to_string(device) + " reads " + where(*g) + ": " + denied;
  return "";
}

void enqueue_checked(StreamImpl* s, int device, const std::string& what, const std::vector<Access>& accesses,
                     std::function<void()> work) {
  for (const Access& a : accesses) {
    if (a.bytes == 0) continue;
    std::string problem = access_problem(device, a.ptr, a.bytes, a.what);
    if (!problem.empty()) {
      enqueue(s, what, [problem] { fault(cudaErrorIllegalAddress, problem); });
      return;
    }
  }
  std::vector<PoolUse> uses;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const Access& a : accesses)
      if (a.bytes != 0)
        if (const Region* g = region_of(a.ptr)) add_use(*g, a.ptr, &uses);
  }
  enqueue_using(s, what, std::move(uses), std::move(work));
}

std::string check_kernel_pointers(int device, const void* params, size_t bytes, std::vector<PoolUse>* uses) {
  std::lock_guard<std::mutex> lock(mu);
  if (regions().empty()) return "";
  const uintptr_t lo = regions().begin()->first;
  const uintptr_t hi = regions().rbegin()->first + regions().rbegin()->second.capacity;
  const char* p = static_cast<const char*>(params);
  for (size_t off = 0; off + sizeof(uintptr_t) <= bytes; off += sizeof(uintptr_t)) {
    uintptr_t word;
    std::memcpy(&word, p + off, sizeof(word));
    if (word < lo || word >= hi) continue;
    const Region* g = region_of(reinterpret_cast<const void*>(word));
    if (g == nullptr) continue;
    const size_t before = uses == nullptr ? 0 : uses->size();
    add_use(*g, reinterpret_cast<const void*>(word), uses);
    if (uses != nullptr && uses->size() > before) uses->back().parameter_word = true;
    std::string denied = access_denied(device, *g);
    if (!denied.empty())
      return "a pointer argument (" + hex(reinterpret_cast<const void*>(word)) + ", bytes " + std::to_string(off) +
             ".." + std::to_string(off + 7) + " of the parameters) points into " + where(*g) + ": " + denied +
             " (the simulator takes every pointer-sized parameter word for a pointer: zero unused slots and padding)";
  }
  return "";
}

void check_pool_uses(const std::vector<PoolUse>& uses, const StreamImpl* s, const std::string& what) {
  if (uses.empty()) return;
  std::string problem;
  {
    std::lock_guard<std::mutex> lock(mu);
    for (const PoolUse& u : uses)
      if (!(problem = use_problem(u, s->id, s->device)).empty()) break;
  }
  if (!problem.empty()) fault(cudaErrorIllegalAddress, what + " " + problem);
}

bool reserve(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu);
  return reserve_locked(device, bytes);
}

void unreserve(int device, size_t bytes) {
  std::lock_guard<std::mutex> lock(mu);
  device_state(device).reserved -= bytes;
}

Region* region_at(const void* p) {
  auto it = regions().find(reinterpret_cast<uintptr_t>(p));
  return it == regions().end() ? nullptr : &it->second;
}

void free_block(Region& r, StreamImpl* s) {
  // A pool block waits in the pool's cache for reuse; a graph's block stays the graph's (its address is fixed).
  auto ran = std::make_shared<bool>(false);
  if (r.graph == nullptr) r.pool->cached.push_back({r.a.base, r.capacity, s->id, ran});
  std::shared_ptr<BlockLife> life = r.life;
  life->freed = true;
  life->free_stream = s->id;
  char* base = r.a.base;
  const size_t capacity = r.capacity;
  // Queued while mu is held: were it queued after, an allocation on this stream by another host thread could
  // take the block (a free on its own stream makes it reusable at once) and queue its task first, and this free
  // would then poison the memory under the new allocation's work.
  enqueue(s, "cudaFreeAsync", [base, capacity, ran, life, number = life->allocation, sid = s->id] {
    POISON(base, capacity);  // a read after the free is an AddressSanitizer report
    std::lock_guard<std::mutex> lock(mu);
    *ran = true;
    life->ran = number;
    life->ran_free = true;
    life->ran_stream = sid;
  });
}

bool graph_allocation_live(const void* base) {
  std::lock_guard<std::mutex> lock(mu);
  Region* r = region_at(base);
  return r != nullptr && r->life && !r->life->freed;
}

void graph_allocation_relaunched(const void* base) {
  std::lock_guard<std::mutex> lock(mu);
  if (Region* r = region_at(base)) r->life->freed = false;
}

void free_graph_allocation(const void* base, StreamImpl* s) {
  std::lock_guard<std::mutex> lock(mu);
  if (Region* r = region_at(base)) free_block(*r, s);
}

void release_graph_memory(const void* base) {
  std::lock_guard<std::mutex> lock(mu);
  Region* r = region_at(base);
  if (r == nullptr || r->graph == nullptr) return;
  auto& gc = graph_cached();
  gc.erase(std::remove_if(gc.begin(), gc.end(), [&](const GraphCached& c) { return c.base == base; }), gc.end());
  if (!r->life->freed) {
    r->graph = nullptr;  // still allocated: its cudaFreeAsync returns it to the pool
    return;
  }
  char* b = r->a.base;
  const size_t capacity = r->capacity;
  const int device = r->a.device;
  regions().erase(reinterpret_cast<uintptr_t>(base));
  release(b, capacity, device);
}

void release_pool_memory(int device) {
  std::lock_guard<std::mutex> lock(mu);
  PoolState& pool = default_pool(device);
  trim(pool, pool.release_threshold, 0);
}

}  // namespace cudasim

using cudasim::set_error;

extern "C" {

cudaError_t cudaMalloc(void** ptr, size_t size) {
  cudasim::count_call("cudaMalloc");
  if (ptr == nullptr) return set_error(cudaErrorInvalidValue);
  const int device = cudasim::current_device();
  if (cudaError_t e = cudasim::check_device(device)) return set_error(e);
  if (cudaError_t e = cudasim::unsafe_call("cudaMalloc")) return e;
  if (size == 0) {
    *ptr = nullptr;
    return cudaSuccess;
  }
  const size_t capacity = cudasim::round_up(size, cudasim::kAlignment);
  std::lock_guard<std::mutex> lock(cudasim::mu);
  if (!cudasim::reserve_locked(device, capacity)) {
    return set_error(cudaErrorMemoryAllocation, "cudaMalloc of " + std::to_string(size) + " bytes on cuda:" +
                                                    std::to_string(device) + " (TANDEM_CUDASIM_MEMORY_MB)");
  }
  char* base = cudasim::fresh(capacity);
  std::memset(base, cudasim::kNanByte, size);
  if (capacity > size) POISON(base + size, capacity - size);
  cudasim::Region g;
  g.a = cudasim::Allocation{base, size, device, cudasim::MemoryKind::Device};
  g.capacity = capacity;
  cudasim::regions()[reinterpret_cast<uintptr_t>(base)] = g;
  cudasim::counters::allocation_changed(base, capacity, true);
  *ptr = base;
  return cudaSuccess;
}

cudaError_t cudaFree(void* ptr) {
  const int device = cudasim::current_device();
  if (cudaError_t e = cudasim::check_device(device)) return set_error(e);
  if (ptr == nullptr) return cudaSuccess;  // also how programs create the context early
  cudasim::Region g;
  {
    std::lock_guard<std::mutex> lock(cudasim::mu);
    const cudasim::Region* r = cudasim::region_of(ptr);
    if (r == nullptr || r->a.base != ptr || r->a.kind != cudasim::MemoryKind::Device)
      return set_error(cudaErrorInvalidValue,
                       "cudaFree of " + cudasim::hex(ptr) + ", which cudaMalloc did not return (or was freed already)");
    g = *r;
  }
  if (cudaError_t e = cudasim::forbid_device_sync(g.a.device, "cudaFree (it synchronizes the device)")) return e;
  cudasim::synchronize_device(g.a.device);  // cudaFree waits for the device's work
  std::lock_guard<std::mutex> lock(cudasim::mu);
  cudasim::counters::allocation_changed(g.a.base, g.capacity, false);
  cudasim::regions().erase(reinterpret_cast<uintptr_t>(ptr));
  cudasim::release(g.a.base, g.capacity, g.a.device);
  return cudaSuccess;
}

cudaError_t cudaDeviceGetDefaultMemPool(cudaMemPool_t* pool, int device) {
  if (pool == nullptr) return set_error(cudaErrorInvalidValue);
  if (cudaError_t e = cudasim::check_device(device)) return set_error(e);
  std::lock_guard<std::mutex> lock(cudasim::mu);
  *pool = &cudasim::default_pool(device);
  return cudaSuccess;
}

cudaError_t cudaMemPoolSetAttribute(cudaMemPool_t handle, enum cudaMemPoolAttr attr, void* value) {
  cudasim::PoolState* pool = cudasim::pool_of(handle);
  if (pool == nullptr || value == nullptr) return set_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(cudasim::mu);
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: pool->release_threshold = *static_cast<uint64_t*>(value); return cudaSuccess;
    case cudaMemPoolReuseFollowEventDependencies:
    case cudaMemPoolReuseAllowOpportunistic:
    case cudaMemPoolReuseAllowInternalDependencies: return cudaSuccess;
    default: return set_error(cudaErrorInvalidValue, "cudaMemPoolSetAttribute: attribute not simulated");
  }
}

cudaError_t cudaMemPoolGetAttribute(cudaMemPool_t handle, enum cudaMemPoolAttr attr, void* value) {
  cudasim::PoolState* pool = cudasim::pool_of(handle);
  if (pool == nullptr || value == nullptr) return set_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(cudasim::mu);
  uint64_t used = 0, cached = 0;
  for (auto& [base, g] : cudasim::regions())
    if (g.pool == pool) used += g.capacity;
  for (auto& c : pool->cached) cached += c.capacity;
  used -= std::min(used, cached);
  switch (attr) {
    case cudaMemPoolAttrReleaseThreshold: *static_cast<uint64_t*>(value) = pool->release_threshold; return cudaSuccess;
    case cudaMemPoolAttrReservedMemCurrent: *static_cast<uint64_t*>(value) = used + cached; return cudaSuccess;
    case cudaMemPoolAttrUsedMemCurrent: *static_cast<uint64_t*>(value) = used; return cudaSuccess;
    default: return set_error(cudaErrorInvalidValue, "cudaMemPoolGetAttribute: attribute not simulated");
  }
}

cudaError_t cudaMemPoolSetAccess(cudaMemPool_t handle, const struct cudaMemAccessDesc* descs, size_t count) {
  cudasim::PoolState* pool = cudasim::pool_of(handle);
  if (pool == nullptr || (descs == nullptr && count > 0)) return set_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(cudasim::mu);
  for (size_t i = 0; i < count; ++i) {
    const int dev = descs[i].location.id;
    if (descs[i].location.type != cudaMemLocationTypeDevice || dev < 0 || dev >= cudasim::device_count())
      return set_error(cudaErrorInvalidValue, "cudaMemPoolSetAccess: not a device location");
    if (dev == pool->device) {
      if (descs[i].flags != cudaMemAccessFlagsProtReadWrite)
        return set_error(cudaErrorInvalidValue, "cudaMemPoolSetAccess: the pool's own device keeps read-write access");
      continue;
    }
    if (descs[i].flags == cudaMemAccessFlagsProtNone)
      pool->access.erase(dev);
    else
      pool->access.insert(dev);
  }
  return cudaSuccess;
}

cudaError_t cudaMemPoolTrimTo(cudaMemPool_t handle, size_t keep) {
  cudasim::PoolState* pool = cudasim::pool_of(handle);
  if (pool == nullptr) return set_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(cudasim::mu);
  cudasim::trim(*pool, keep, 0);
  return cudaSuccess;
}

cudaError_t cudaMallocAsync(void** ptr, size_t size, cudaStream_t stream) {
  cudasim::count_call("cudaMallocAsync");
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  cudasim::PoolState* pool;
  {
    std::lock_guard<std::mutex> lock(cudasim::mu);
    pool = &cudasim::default_pool(s->device);
  }
  return cudasim::pool_alloc(ptr, size, *pool, s);
}

cudaError_t cudaMallocFromPoolAsync(void** ptr, size_t size, cudaMemPool_t handle, cudaStream_t stream) {
  cudasim::count_call("cudaMallocFromPoolAsync");
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  cudasim::PoolState* pool = cudasim::pool_of(handle);
  if (pool == nullptr) return set_error(cudaErrorInvalidValue, "cudaMallocFromPoolAsync: not a memory pool");
  return cudasim::pool_alloc(ptr, size, *pool, s);
}

cudaError_t cudaFreeAsync(void* ptr, cudaStream_t stream) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  if (ptr == nullptr) return cudaSuccess;
  const void* graph = cudasim::capture_graph(s);
  std::string bad;
  {
    std::lock_guard<std::mutex> lock(cudasim::mu);
    cudasim::Region* r = cudasim::region_at(ptr);
    if (r == nullptr || r->a.kind != cudasim::MemoryKind::Pool) {
      bad = "cudaFreeAsync of " + cudasim::hex(ptr) + ", which cudaMallocAsync did not return";
    } else if (r->life->freed) {
      bad = "cudaFreeAsync of " + cudasim::hex(ptr) + " twice";
    } else if (graph != nullptr && r->graph != graph) {
      // In a capture the free becomes a free node, which only frees the graph's own allocations.
      bad = "cudaFreeAsync of " + cudasim::hex(ptr) +
            " during stream capture: a free node frees only an "
            "allocation of its own graph (made by cudaMallocAsync in the same capture)";
    } else if (graph == nullptr && r->freed_in_graph) {
      bad = "cudaFreeAsync of " + cudasim::hex(ptr) + ", a graph allocation that its graph frees itself";
    } else {
      if (graph != nullptr) {
        r->freed_in_graph = true;
        cudasim::graph_cached().push_back({graph, r->a.base, r->capacity, s->id});
        cudasim::note_graph_free(graph, ptr);
      }
      cudasim::free_block(*r, s);
      return cudaSuccess;
    }
  }
  if (graph != nullptr) return cudasim::fail_capture(s, cudaErrorInvalidValue, bad);
  return set_error(cudaErrorInvalidValue, bad);
}

cudaError_t cudaHostAlloc(void** ptr, size_t size, unsigned int flags) {
  if (ptr == nullptr) return set_error(cudaErrorInvalidValue);
  if ((flags & ~(cudaHostAllocPortable | cudaHostAllocMapped | cudaHostAllocWriteCombined)) != 0)
    return set_error(cudaErrorInvalidValue, "cudaHostAlloc: unknown flags");
  if (cudaError_t e = cudasim::unsafe_call("cudaHostAlloc")) return e;
  const size_t capacity = cudasim::round_up(std::max<size_t>(size, 1), cudasim::kAlignment);
  char* base = cudasim::fresh(capacity);
  if (base == nullptr) return set_error(cudaErrorMemoryAllocation);
  std::lock_guard<std::mutex> lock(cudasim::mu);
  cudasim::Region g;
  g.a = cudasim::Allocation{base, size, -1, cudasim::MemoryKind::PinnedHost};
  g.capacity = capacity;
  cudasim::regions()[reinterpret_cast<uintptr_t>(base)] = g;
  cudasim::counters::allocation_changed(base, capacity, true);
  *ptr = base;
  return cudaSuccess;
}

cudaError_t cudaMallocHost(void** ptr, size_t size) { return cudaHostAlloc(ptr, size, cudaHostAllocDefault); }

cudaError_t cudaFreeHost(void* ptr) {
  if (ptr == nullptr) return cudaSuccess;
  {
    std::lock_guard<std::mutex> lock(cudasim::mu);
    const cudasim::Region* r = cudasim::region_of(ptr);
    if (r == nullptr || r->a.base != ptr || r->a.kind != cudasim::MemoryKind::PinnedHost)
      return set_error(cudaErrorInvalidValue, "cudaFreeHost of memory cudaHostAlloc did not return");
  }
  // Like cudaFree, it waits for queued work (which may still copy from or to it).
  for (int d = 0; d < cudasim::device_count(); ++d)
    if (cudaError_t e = cudasim::forbid_device_sync(d, "cudaFreeHost (it synchronizes every device)")) return e;
  for (int d = 0; d < cudasim::device_count(); ++d) cudasim::synchronize_device(d);
  std::lock_guard<std::mutex> lock(cudasim::mu);
  const cudasim::Region* r = cudasim::region_of(ptr);
  if (r != nullptr) cudasim::counters::allocation_changed(r->a.base, r->capacity, false);
  cudasim::regions().erase(reinterpret_cast<uintptr_t>(ptr));
  std::free(ptr);
  return cudaSuccess;
}

cudaError_t cudaHostGetDevicePointer(void** device_ptr, void* host_ptr, unsigned int flags) {
  if (device_ptr == nullptr || flags != 0) return set_error(cudaErrorInvalidValue);
  std::lock_guard<std::mutex> lock(cudasim::mu);
  const cudasim::Region* r = cudasim::region_of(host_ptr);
  if (r == nullptr || r->a.kind != cudasim::MemoryKind::PinnedHost)
    return set_error(cudaErrorInvalidValue, "cudaHostGetDevicePointer of memory that is not pinned");
  *device_ptr = host_ptr;  // unified addressing: the same address on the host and every device
  return cudaSuccess;
}

cudaError_t cudaMemcpyAsync(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind, cudaStream_t stream) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  return cudasim::copy_async(dst, src, count, kind, s, "cudaMemcpyAsync");
}

cudaError_t cudaMemcpy(void* dst, const void* src, size_t count, enum cudaMemcpyKind kind) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(nullptr, &err);
  if (s == nullptr) return set_error(err);
  if (cudaError_t e = cudasim::copy_async(dst, src, count, kind, s, "cudaMemcpy")) return e;
  return set_error(cudasim::synchronize(s));
}

cudaError_t cudaMemcpyPeerAsync(void* dst, int dst_device, const void* src, int src_device, size_t count,
                                cudaStream_t stream) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  if (count == 0) return cudaSuccess;
  cudasim::Region gd, gs;
  if (cudasim::side_of(dst, &gd) != cudasim::Side::Device || gd.a.device != dst_device ||
      cudasim::side_of(src, &gs) != cudasim::Side::Device || gs.a.device != src_device)
    return set_error(cudaErrorInvalidValue, "cudaMemcpyPeerAsync: the pointers are not memory of cuda:" +
                                                std::to_string(dst_device) + " and cuda:" + std::to_string(src_device));
  std::string bad = cudasim::check_range(dst, count, cudasim::Side::Device, gd, "destination");
  if (bad.empty()) bad = cudasim::check_range(src, count, cudasim::Side::Device, gs, "source");
  if (!bad.empty()) return set_error(cudaErrorInvalidValue, "cudaMemcpyPeerAsync: " + bad);
  // Peer copies work without peer access (the driver stages them); only kernels need access.
  const int counting = cudasim::counters::mode();
  const TandemCudasimOp op =
      cudasim::counters::library_op(TANDEM_CUDASIM_COPY, s->device, s->id, "cudaMemcpyPeerAsync", "copy_peer",
                                    "copy_peer", "", 0, static_cast<double>(count), static_cast<double>(count));
  cudasim::enqueue_using(s, "cudaMemcpyPeerAsync", cudasim::uses_of({dst, src}), [dst, src, count, counting, op] {
    std::memmove(dst, src, count);
    if (cudasim::counters::records(counting)) cudasim::counters::record(op);
  });
  return cudaSuccess;
}

cudaError_t cudaMemsetAsync(void* ptr, int value, size_t count, cudaStream_t stream) {
  cudaError_t err;
  CUstream_st* s = cudasim::resolve_stream(stream, &err);
  if (s == nullptr) return set_error(err);
  if (count == 0) return cudaSuccess;
  cudasim::Region g;
  if (cudasim::side_of(ptr, &g) != cudasim::Side::Device)
    return set_error(cudaErrorInvalidValue, "cudaMemsetAsync of memory that is not device memory");
  std::string bad = cudasim::check_range(ptr, count, cudasim::Side::Device, g, "destination");
  if (!bad.empty()) return set_error(cudaErrorInvalidValue, "cudaMemsetAsync: " + bad);
  const int counting = cudasim::counters::mode();
  const TandemCudasimOp op = cudasim::counters::library_op(TANDEM_CUDASIM_COPY, s->device, s->id, "cudaMemsetAsync",
                                                           "memset", "memset", "", 0, 0, static_cast<double>(count));
  cudasim::enqueue_using(s, "cudaMemsetAsync", cudasim::uses_of({ptr}), [ptr, value, count, counting, op] {
    std::memset(ptr, value, count);
    if (cudasim::counters::records(counting)) cudasim::counters::record(op);
  });
  return cudaSuccess;
}

cudaError_t cudaMemset(void* ptr, int value, size_t count) {
  if (cudaError_t e = cudaMemsetAsync(ptr, value, count, nullptr)) return e;
  return cudaDeviceSynchronize();
}

cudaError_t cudaMemGetInfo(size_t* free_bytes, size_t* total) {
  const int device = cudasim::current_device();
  std::lock_guard<std::mutex> lock(cudasim::mu);
  const size_t limit = cudasim::config().memory_bytes, held = cudasim::device_state(device).reserved;
  if (free_bytes != nullptr) *free_bytes = limit - std::min(limit, held);
  if (total != nullptr) *total = limit;
  return cudaSuccess;
}

// Copies from or to pageable host memory so far (each stalls its host thread): tests find it with dlsym.
unsigned long long tandem_cudasim_pageable_copies(void) { return cudasim::pageable_copies.load(); }

}  // extern "C"
