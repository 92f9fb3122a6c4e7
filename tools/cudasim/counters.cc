// The simulated GPU's cost counters: the record of finished ops, the counting of kernels' memory accesses (the
// instrumentation calls of -fsanitize=kernel-address land here), atomics and the kernels' FLOP counts.
#include "tools/cudasim/counters.h"

#include <dlfcn.h>
#include <sys/mman.h>

#include <cerrno>
#include <cstdio>
#include <cstdlib>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstring>

#include "tools/cudasim/race_hidden.h"
#include "tools/cudasim/sim.h"
#include "tools/cudasim/simt.h"

namespace cudasim {
namespace counters {

namespace {

std::atomic<int> g_mode{TANDEM_CUDASIM_COUNTING_OFF};
std::mutex g_ops_mu;
std::vector<TandemCudasimOp>& ops() {
  static auto* v = new std::vector<TandemCudasimOp>();
  return *v;
}

void copy_text(char* dst, size_t cap, const std::string& s) {
  const size_t n = std::min(cap - 1, s.size());
  std::memcpy(dst, s.data(), n);
  dst[n] = '\0';
}

// The running thread of a counted launch on this host thread (null while no counted kernel code runs here).
struct Sink {
  uintptr_t coords = 0;  // &simt::tl_coords, which kernel code reads for threadIdx (not shared memory)
  int tid = 0;
  BlockCounter* counter = nullptr;
};
thread_local Sink* tl_sink __attribute__((tls_model("initial-exec"))) = nullptr;
thread_local Sink tl_sink_storage;

inline void on_access(uintptr_t addr, uint32_t size, int kind, void* site) {
  Sink* s = tl_sink;
  if (s == nullptr || addr == s->coords) return;
  RaceHidden hidden;  // called from each CUDA thread's fiber: the block's counts are the engine's bookkeeping
  s->counter->access(addr, size, kind, reinterpret_cast<uintptr_t>(site));
}

// The instrumentation's shadow (GCC's inline checks read the byte at (addr >> 3) + kShadowOffset before each
// access and call a report function when it is not zero): zero everywhere, except over device memory and
// the static TLS of threads running counted blocks while counting is on, so that only those accesses reach
// the counters and the others cost one inline check. It covers every user address of x86-64 (as
// AddressSanitizer's does, at the same place): [kLowShadow, kShadowGap) for the low 2 GiB, [kHighShadow,
// kShadowEnd) for the rest, and the gap between them, the shadow of the shadow, kept unmapped.
#if defined(__x86_64__) && !defined(__SANITIZE_ADDRESS__) && !defined(__SANITIZE_THREAD__)
#define CUDASIM_SHADOW 1
constexpr uintptr_t kShadowOffset = 0x7fff8000;  // tools/bazel/cuda.bzl passes it to the compiler
constexpr uintptr_t kLowShadow = 0x7fff8000, kShadowGap = 0x8fff7000, kHighShadow = 0x02008fff7000,
                    kShadowEnd = 0x10007fff8000;

__attribute__((constructor(101))) void reserve_shadow() {
  struct Part {
    uintptr_t lo, hi;
    int prot;
  };
  const Part parts[] = {{kLowShadow, kShadowGap, PROT_READ | PROT_WRITE},
                        {kShadowGap, kHighShadow, PROT_NONE},
                        {kHighShadow, kShadowEnd, PROT_READ | PROT_WRITE}};
  for (const Part& p : parts) {
    void* m = mmap(reinterpret_cast<void*>(p.lo), p.hi - p.lo, p.prot,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE | MAP_FIXED_NOREPLACE, -1, 0);
    if (m != reinterpret_cast<void*>(p.lo)) {
      std::fprintf(stderr,
                   "tandem cudasim: cannot reserve the cost counters' shadow memory at [%#lx, %#lx) (%s): the "
                   "simulated GPU's kernels cannot run\n",
                   static_cast<unsigned long>(p.lo), static_cast<unsigned long>(p.hi), std::strerror(errno));
      std::abort();
    }
  }
}
#endif

inline uint8_t* shadow_of(uintptr_t addr) {
#if defined(CUDASIM_SHADOW)
  return reinterpret_cast<uint8_t*>((addr >> 3) + kShadowOffset);
#else
  (void)addr;
  return nullptr;
#endif
}

void mark_shadow(uintptr_t lo, uintptr_t hi, bool on) {
#if defined(CUDASIM_SHADOW)
  if (hi <= lo) return;
  uint8_t* first = shadow_of(lo);
  uint8_t* last = shadow_of(hi - 1);
  std::memset(first, on ? 0xff : 0, static_cast<size_t>(last - first) + 1);
#else
  (void)lo, (void)hi, (void)on;
#endif
}

inline bool marked(uintptr_t addr) {
#if defined(CUDASIM_SHADOW)
  return *shadow_of(addr) != 0;
#else
  (void)addr;
  return false;
#endif
}

// The calling host thread's static TLS block (x86-64 glibc: below the thread pointer), where the __shared__
// arrays of the kernels (static thread_local in the simulator build) live.
void static_tls(uintptr_t* lo, uintptr_t* hi) {
  *lo = *hi = 0;
#if defined(__x86_64__)
  using Info = void (*)(size_t*, size_t*);
  static const Info info = reinterpret_cast<Info>(dlsym(RTLD_DEFAULT, "_dl_get_tls_static_info"));
  if (info == nullptr) return;
  size_t size = 0, align = 0;
  info(&size, &align);
  uintptr_t tp = 0;
  asm("mov %%fs:0, %0" : "=r"(tp));
  *lo = tp - size;
  *hi = tp;
#endif
}

void add_runs(std::map<uint64_t, uint64_t>& runs, const std::vector<uint64_t>& sorted) {
  size_t i = 0;
  while (i < sorted.size()) {
    uint64_t lo = sorted[i], hi = lo + 1;
    ++i;
    while (i < sorted.size() && sorted[i] == hi) {
      ++hi;
      ++i;
    }
    auto it = runs.upper_bound(lo);
    if (it != runs.begin() && std::prev(it)->second >= lo) {
      --it;
      lo = it->first;
      hi = std::max(hi, it->second);
      it = runs.erase(it);
    }
    while (it != runs.end() && it->first <= hi) {
      hi = std::max(hi, it->second);
      it = runs.erase(it);
    }
    runs.emplace(lo, hi);
  }
}

uint64_t run_length(const std::map<uint64_t, uint64_t>& runs) {
  uint64_t n = 0;
  for (const auto& r : runs) n += r.second - r.first;
  return n;
}

void sort_unique(std::vector<uint64_t>& v) {
  std::sort(v.begin(), v.end());
  v.erase(std::unique(v.begin(), v.end()), v.end());
}

// The counts a launch sums over its blocks (and scales when it counts some of them only).
constexpr uint64_t TandemCudasimOp::*kBlockCounts[] = {&TandemCudasimOp::global_load_requests,
                                                       &TandemCudasimOp::global_store_requests,
                                                       &TandemCudasimOp::global_load_sectors,
                                                       &TandemCudasimOp::global_store_sectors,
                                                       &TandemCudasimOp::global_load_bytes,
                                                       &TandemCudasimOp::global_store_bytes,
                                                       &TandemCudasimOp::shared_requests,
                                                       &TandemCudasimOp::shared_wavefronts,
                                                       &TandemCudasimOp::atomics,
                                                       &TandemCudasimOp::atomic_requests,
                                                       &TandemCudasimOp::barriers,
                                                       &TandemCudasimOp::warp_collectives};

constexpr size_t kWarpBufferLimit = size_t{1} << 18;  // accesses a warp keeps before it is counted anyway
constexpr size_t kSectorCompaction = size_t{1} << 20;

}  // namespace

int mode() { return g_mode.load(std::memory_order_relaxed); }

void record(const TandemCudasimOp& op) {
  std::lock_guard<std::mutex> lock(g_ops_mu);
  ops().push_back(op);
}

TandemCudasimOp library_op(TandemCudasimOpKind kind, int device, uint64_t stream, const std::string& name,
                           const std::string& detail, const char* op_class, const char* precision, double flops,
                           double bytes_read, double bytes_written) {
  TandemCudasimOp op;
  std::memset(&op, 0, sizeof(op));
  op.kind = kind;
  op.device = device;
  op.stream = stream;
  copy_text(op.name, sizeof(op.name), name);
  copy_text(op.detail, sizeof(op.detail), detail);
  copy_text(op.op_class, sizeof(op.op_class), op_class);
  copy_text(op.precision, sizeof(op.precision), precision);
  op.flops = flops;
  op.bytes_read = bytes_read;
  op.bytes_written = bytes_written;
  return op;
}

Launch::Launch(const std::string& name, const std::string& site, int device, uint64_t stream, const uint32_t grid[3],
               const uint32_t block[3], uint64_t shared_bytes) {
  op_ = library_op(TANDEM_CUDASIM_KERNEL, device, stream, name, site, "", "", 0, 0, 0);
  for (int i = 0; i < 3; ++i) {
    op_.grid[i] = grid[i];
    op_.block[i] = block[i];
  }
  op_.dynamic_shared_bytes = shared_bytes;
  op_.threads = uint64_t{grid[0]} * grid[1] * grid[2] * block[0] * block[1] * block[2];
  const uint64_t blocks = uint64_t{grid[0]} * grid[1] * grid[2];
  stride_ = (blocks + kCountedBlocks - 1) / kCountedBlocks;
}

void Launch::add(const TandemCudasimOp& b, const std::vector<uint64_t>& loaded, const std::vector<uint64_t>& stored) {
  std::lock_guard<std::mutex> lock(mu_);
  counted_++;
  for (uint64_t TandemCudasimOp::*count : kBlockCounts) op_.*count += b.*count;
  op_.flops += b.flops;
  for (int i = 0; i < TANDEM_CUDASIM_REUSE_BUCKETS; ++i) op_.reuse_load_sectors[i] += b.reuse_load_sectors[i];
  add_runs(loaded_, loaded);
  add_runs(stored_, stored);
}

TandemCudasimOp Launch::finish() {
  std::lock_guard<std::mutex> lock(mu_);
  TandemCudasimOp op = op_;
  op.distinct_load_sectors = run_length(loaded_);
  op.distinct_store_sectors = run_length(stored_);
  const uint64_t blocks = uint64_t{op.grid[0]} * op.grid[1] * op.grid[2];
  if (counted_ == 0 || counted_ == blocks) return op;
  const double f = static_cast<double>(blocks) / static_cast<double>(counted_);
  auto scale = [f](uint64_t& v) { v = static_cast<uint64_t>(std::llround(static_cast<double>(v) * f)); };
  for (uint64_t TandemCudasimOp::*count : kBlockCounts) scale(op.*count);
  scale(op.distinct_load_sectors);
  scale(op.distinct_store_sectors);
  for (uint64_t& v : op.reuse_load_sectors) scale(v);
  op.flops *= f;
  return op;
}

void allocation_changed(const void* base, size_t bytes, bool added) {
  if (!records(mode())) return;
  const uintptr_t lo = reinterpret_cast<uintptr_t>(base);
  mark_shadow(lo, lo + bytes, added);
}

BlockCounter::BlockCounter(Launch* launch, int threads_per_block)
    : launch_(launch), warps_(static_cast<size_t>((threads_per_block + 31) / 32)), last_(warps_.size() * 32, -1) {
  std::memset(&counts_, 0, sizeof(counts_));
  static_tls(&tls_lo_, &tls_hi_);
  mark_shadow(tls_lo_, tls_hi_, true);
}

BlockCounter::~BlockCounter() {
  leave();
  mark_shadow(tls_lo_, tls_hi_, false);
}

void BlockCounter::enter(int tid) {
  Sink& s = tl_sink_storage;
  s.coords = reinterpret_cast<uintptr_t>(&simt::tl_coords);
  s.tid = tid;
  s.counter = this;
  tl_sink = &s;
}

void BlockCounter::leave() { tl_sink = nullptr; }

void BlockCounter::barrier() {
  counts_.barriers++;
  for (size_t w = 0; w < warps_.size(); ++w) flush(w);
}

void BlockCounter::collective() { counts_.warp_collectives++; }

void BlockCounter::flops(uint64_t n) {
  RaceHidden hidden;  // as in on_access
  counts_.flops += static_cast<double>(n);
}

void BlockCounter::end_block() {
  for (size_t w = 0; w < warps_.size(); ++w) flush(w);
  sort_unique(loaded_);
  sort_unique(stored_);
  launch_->add(counts_, loaded_, stored_);
  std::memset(&counts_, 0, sizeof(counts_));
  loaded_.clear();
  stored_.clear();
  touched_.clear();
  clock_ = 0;
}

void BlockCounter::access(uintptr_t addr, uint32_t size, int kind, uintptr_t site) {
  uint8_t k;
  if (addr >= tls_lo_ && addr < tls_hi_) {
    if (kind == 2) return;  // shared-memory atomics are not counted
    k = static_cast<uint8_t>(3 + kind);
  } else {
    k = static_cast<uint8_t>(kind);
    if (kind == 0) counts_.global_load_bytes += size;
    if (kind == 1) counts_.global_store_bytes += size;
    if (kind == 2) counts_.atomics++;
  }
  const int tid = tl_sink->tid;
  const size_t w = static_cast<size_t>(tid / 32);
  std::vector<Rec>& buf = warps_[w];
  int64_t& last = last_[w * 32 + static_cast<size_t>(tid % 32)];
  // The host compiler may split a kernel's 16-byte vector access into narrower ones: the lane's accesses of one
  // kind that follow each other over adjacent bytes of one aligned 16-byte piece are one access again.
  if (last >= 0) {
    Rec& prev = buf[static_cast<size_t>(last)];
    const uint64_t lo = std::min<uint64_t>(prev.addr, addr),
                   hi = std::max<uint64_t>(prev.addr + prev.size, addr + size);
    if (prev.kind == k && k != 2 && (addr == prev.addr + prev.size || addr + size == prev.addr) &&
        lo / 16 == (hi - 1) / 16) {
      prev.addr = lo;
      prev.size = static_cast<uint32_t>(hi - lo);
      return;
    }
  }
  last = static_cast<int64_t>(buf.size());
  buf.push_back(Rec{site, addr, size, static_cast<uint8_t>(tid % 32), k});
  if (buf.size() >= kWarpBufferLimit) flush(w);
}

void BlockCounter::flush(size_t w) {
  std::vector<Rec>& recs = warps_[w];
  std::fill(last_.begin() + static_cast<std::ptrdiff_t>(w * 32),
            last_.begin() + static_cast<std::ptrdiff_t>(w * 32 + 32), -1);
  if (recs.empty()) return;
  // Lane i's k-th access at a place (of one kind) is the k-th request of that place: request `base + k` of
  // the place, numbered densely, which remembers its first access (the order the warp issued it).
  std::vector<Place>& places = places_;
  places.clear();
  std::vector<uint32_t>& req_of = req_of_;  // per access: (place, ordinal) packed below
  req_of.resize(recs.size());
  std::vector<uint32_t>& place_of = place_of_;
  place_of.resize(recs.size());
  size_t p = 0;
  for (size_t ri = 0; ri < recs.size(); ++ri) {
    const Rec& r = recs[ri];
    if (p >= places.size() || places[p].site != r.site || places[p].kind != r.kind) {
      p = 0;
      while (p < places.size() && (places[p].site != r.site || places[p].kind != r.kind)) ++p;
      if (p == places.size()) places.push_back(Place{r.site, r.kind, {}, 0, {}});
    }
    Place& pl = places[p];
    const uint32_t ord = pl.n[r.lane]++;
    if (ord == pl.first.size()) pl.first.push_back(ri);
    place_of[ri] = static_cast<uint32_t>(p);
    req_of[ri] = ord;
  }
  size_t requests = 0;
  for (Place& pl : places) {
    pl.base = requests;
    requests += pl.first.size();
  }
  // The units (sectors, or 4-byte words of shared memory) of each request, gathered by request.
  std::vector<uint32_t>& start = start_;
  start.assign(requests + 1, 0);
  auto units = [](const Rec& r, uint64_t* first) {
    const uint64_t shift = r.kind >= 3 ? 2 : 5;
    *first = r.addr >> shift;
    return static_cast<uint32_t>(((r.addr + std::max<uint32_t>(r.size, 1) - 1) >> shift) - *first + 1);
  };
  uint64_t u0;
  for (size_t ri = 0; ri < recs.size(); ++ri) start[places[place_of[ri]].base + req_of[ri] + 1] += units(recs[ri], &u0);
  for (size_t q = 0; q < requests; ++q) start[q + 1] += start[q];
  std::vector<uint64_t>& flat = flat_;
  flat.resize(start[requests]);
  std::vector<uint32_t>& fill = fill_;
  fill.assign(start.begin(), start.end() - 1);
  for (size_t ri = 0; ri < recs.size(); ++ri) {
    const size_t q = places[place_of[ri]].base + req_of[ri];
    const uint32_t n = units(recs[ri], &u0);
    for (uint32_t i = 0; i < n; ++i) flat[fill[q]++] = u0 + i;
  }
  // The requests in the order the warp issued them, for the reuse distances.
  std::vector<std::pair<size_t, uint32_t>>& order = order_;
  order.clear();
  for (size_t pi = 0; pi < places.size(); ++pi)
    for (size_t k = 0; k < places[pi].first.size(); ++k)
      order.push_back({places[pi].first[k], static_cast<uint32_t>(places[pi].base + k)});
  std::sort(order.begin(), order.end());
  std::vector<uint8_t>& kind_of = kind_of_;
  kind_of.resize(requests);
  for (const Place& pl : places)
    for (size_t k = 0; k < pl.first.size(); ++k) kind_of[pl.base + k] = pl.kind;
  recs.clear();
  for (const auto& [first, q] : order) {
    const int kind = kind_of[q];
    uint64_t* b = flat.data() + start[q];
    uint64_t* e = flat.data() + start[q + 1];
    std::sort(b, e);
    e = std::unique(b, e);
    const uint64_t distinct = static_cast<uint64_t>(e - b);
    if (kind >= 3) {
      uint32_t per_bank[32] = {};
      for (uint64_t* u = b; u != e; ++u) per_bank[*u % 32]++;
      counts_.shared_requests++;
      counts_.shared_wavefronts += *std::max_element(per_bank, per_bank + 32);
      continue;
    }
    for (uint64_t* u = b; u != e; ++u) {
      if (kind != 1) loaded_.push_back(*u);
      if (kind != 0) stored_.push_back(*u);
      const uint64_t previous = touched_.exchange(*u, clock_);
      if (kind == 0 && previous != Touched::kNone) {
        const uint64_t d = clock_ - previous;
        int bucket = 0;
        while (bucket + 1 < TANDEM_CUDASIM_REUSE_BUCKETS && d >= (uint64_t{1} << (bucket + 10))) ++bucket;
        counts_.reuse_load_sectors[bucket]++;
      }
    }
    if (kind == 0) {
      counts_.global_load_requests++;
      counts_.global_load_sectors += distinct;
    } else if (kind == 1) {
      counts_.global_store_requests++;
      counts_.global_store_sectors += distinct;
    } else {
      counts_.atomic_requests++;
    }
    clock_ += 32 * distinct;
  }
  if (loaded_.size() > kSectorCompaction) sort_unique(loaded_);
  if (stored_.size() > kSectorCompaction) sort_unique(stored_);
}

uint64_t Touched::exchange(uint64_t key, uint64_t value) {
  if (2 * (used_ + 1) > keys_.size()) grow();
  size_t i = slot(key);
  while (stamps_[i] == stamp_ && keys_[i] != key) i = (i + 1) & (keys_.size() - 1);
  if (stamps_[i] != stamp_) {
    stamps_[i] = stamp_;
    keys_[i] = key;
    values_[i] = value;
    ++used_;
    return kNone;
  }
  const uint64_t old = values_[i];
  values_[i] = value;
  return old;
}

void Touched::clear() {
  ++stamp_;
  used_ = 0;
}

size_t Touched::slot(uint64_t key) const { return (key * 0x9e3779b97f4a7c15ull >> 20) & (keys_.size() - 1); }

void Touched::grow() {
  std::vector<uint64_t> keys = std::move(keys_), values = std::move(values_);
  std::vector<uint32_t> stamps = std::move(stamps_);
  const size_t size = std::max<size_t>(1024, keys.size() * 2);
  keys_.assign(size, 0);
  values_.assign(size, 0);
  stamps_.assign(size, 0);
  const uint32_t old_stamp = stamp_;
  stamp_ = 1;
  used_ = 0;
  for (size_t i = 0; i < keys.size(); ++i)
    if (stamps[i] == old_stamp) exchange(keys[i], values[i]);
}

std::string to_json(const TandemCudasimOp& op) {
  std::string j = "{";
  auto key = [&](const char* k) { j += (j.size() > 1 ? ",\"" : "\"") + std::string(k) + "\":"; };
  auto text = [&](const char* k, const char* v) {
    key(k);
    j += '"';
    for (const char* c = v; *c != '\0'; ++c) {
      const unsigned char u = static_cast<unsigned char>(*c);
      if (u == '"' || u == '\\') {
        j += '\\';
        j += *c;
      } else if (u < 0x20) {
        char e[8];
        std::snprintf(e, sizeof(e), "\\u%04x", u);
        j += e;
      } else {
        j += *c;
      }
    }
    j += '"';
  };
  auto number = [&](const char* k, double v) {
    key(k);
    char b[32];
    std::snprintf(b, sizeof(b), "%.17g", v);
    j += b;
  };
  auto array = [&](const char* k, const uint64_t* v, int n) {
    key(k);
    j += '[';
    for (int i = 0; i < n; ++i) j += (i > 0 ? "," : "") + std::to_string(v[i]);
    j += ']';
  };
  number("kind", op.kind);
  number("device", op.device);
  number("stream", static_cast<double>(op.stream));
  text("name", op.name);
  text("detail", op.detail);
  text("op_class", op.op_class);
  text("precision", op.precision);
  const uint64_t grid[3] = {op.grid[0], op.grid[1], op.grid[2]}, block[3] = {op.block[0], op.block[1], op.block[2]};
  array("grid", grid, 3);
  array("block", block, 3);
  const std::pair<const char*, uint64_t> counts[] = {{"dynamic_shared_bytes", op.dynamic_shared_bytes},
                                                     {"threads", op.threads},
                                                     {"global_load_requests", op.global_load_requests},
                                                     {"global_store_requests", op.global_store_requests},
                                                     {"global_load_sectors", op.global_load_sectors},
                                                     {"global_store_sectors", op.global_store_sectors},
                                                     {"global_load_bytes", op.global_load_bytes},
                                                     {"global_store_bytes", op.global_store_bytes},
                                                     {"distinct_load_sectors", op.distinct_load_sectors},
                                                     {"distinct_store_sectors", op.distinct_store_sectors},
                                                     {"shared_requests", op.shared_requests},
                                                     {"shared_wavefronts", op.shared_wavefronts},
                                                     {"atomics", op.atomics},
                                                     {"atomic_requests", op.atomic_requests},
                                                     {"barriers", op.barriers},
                                                     {"warp_collectives", op.warp_collectives}};
  for (const auto& [k, v] : counts) number(k, static_cast<double>(v));
  array("reuse_load_sectors", op.reuse_load_sectors, TANDEM_CUDASIM_REUSE_BUCKETS);
  number("flops", op.flops);
  number("bytes_read", op.bytes_read);
  number("bytes_written", op.bytes_written);
  number("ranks", op.ranks);
  number("groups", op.groups);
  return j + "}";
}

}  // namespace counters

namespace simt {

void count_flops(uint64_t n) {
  counters::Sink* s = counters::tl_sink;
  if (s != nullptr) s->counter->flops(n);
}

namespace {
template <typename T>
T apply_atomic(AtomicOp op, T old, T v, T compare) {
  switch (op) {
    case AtomicOp::Add: return static_cast<T>(old + v);
    case AtomicOp::Sub: return static_cast<T>(old - v);
    case AtomicOp::Exch: return v;
    case AtomicOp::Min: return v < old ? v : old;
    case AtomicOp::Max: return old < v ? v : old;
    case AtomicOp::Cas: return old == compare ? v : old;
  }
  return old;
}

template <typename T>
uint64_t atomic_on(AtomicOp op, void* addr, uint64_t operand, uint64_t compare) {
  using Bits = typename std::conditional<sizeof(T) == 4, uint32_t, uint64_t>::type;
  Bits* bits = static_cast<Bits*>(addr);
  const T v = from_bits<T>(operand), c = from_bits<T>(compare);
  Bits expected = __atomic_load_n(bits, __ATOMIC_RELAXED);
  for (;;) {
    const T old = from_bits<T>(expected);
    const Bits desired = static_cast<Bits>(to_bits(apply_atomic(op, old, v, c)));
    if (__atomic_compare_exchange_n(bits, &expected, desired, false, __ATOMIC_SEQ_CST, __ATOMIC_RELAXED))
      return to_bits(old);
  }
}
}  // namespace

uint64_t atomic(AtomicOp op, AtomicType type, void* addr, uint64_t operand, uint64_t compare) {
  const uint32_t size = type == AtomicType::U64 || type == AtomicType::F64 ? 8 : 4;
  counters::on_access(reinterpret_cast<uintptr_t>(addr), size, 2, __builtin_return_address(0));
  switch (type) {
    case AtomicType::I32: return atomic_on<int32_t>(op, addr, operand, compare);
    case AtomicType::U32: return atomic_on<uint32_t>(op, addr, operand, compare);
    case AtomicType::U64: return atomic_on<uint64_t>(op, addr, operand, compare);
    case AtomicType::F32: return atomic_on<float>(op, addr, operand, compare);
    case AtomicType::F64: return atomic_on<double>(op, addr, operand, compare);
  }
  return 0;
}

}  // namespace simt
}  // namespace cudasim

extern "C" {

void tandem_cudasim_counting(int mode) {
  if (cudasim::counters::records(mode)) {
    std::lock_guard<std::mutex> lock(cudasim::counters::g_ops_mu);
    cudasim::counters::ops().clear();
  }
  bool was_on = false;
  const bool on = cudasim::counters::records(mode);
  cudasim::visit_allocations([&] { was_on = cudasim::counters::records(cudasim::counters::g_mode.exchange(mode)); },
                             [&](const void* base, size_t bytes) {
                               const uintptr_t lo = reinterpret_cast<uintptr_t>(base);
                               if (was_on != on) cudasim::counters::mark_shadow(lo, lo + bytes, on);
                             });
}

const char* tandem_cudasim_take_ops_json(void) {
  static thread_local std::string text;
  std::vector<TandemCudasimOp> ops;
  {
    std::lock_guard<std::mutex> lock(cudasim::counters::g_ops_mu);
    ops.swap(cudasim::counters::ops());
  }
  text = "[";
  for (size_t i = 0; i < ops.size(); ++i) text += (i > 0 ? ",\n" : "") + cudasim::counters::to_json(ops[i]);
  text += "]";
  return text.c_str();
}

size_t tandem_cudasim_take_ops(TandemCudasimOp* out, size_t max) {
  std::lock_guard<std::mutex> lock(cudasim::counters::g_ops_mu);
  auto& v = cudasim::counters::ops();
  const size_t n = std::min(max, v.size());
  std::copy(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n), out);
  v.erase(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(n));
  return n;
}

// The instrumentation's calls from the kernels' objects (tools/bazel/cuda.bzl): the report functions of its
// inline checks, called for marked memory only, and the outline checks it may use instead, which look at the
// shadow themselves. Absent from the sanitizer builds, whose runtimes own these names (the kernels are not
// compiled for counting there).
#if defined(CUDASIM_SHADOW)
#define CUDASIM_ACCESS(N)                                                                                 \
  void __asan_report_load##N##_noabort(uintptr_t a) {                                                     \
    cudasim::counters::on_access(a, N, 0, __builtin_return_address(0));                                   \
  }                                                                                                       \
  void __asan_report_store##N##_noabort(uintptr_t a) {                                                    \
    cudasim::counters::on_access(a, N, 1, __builtin_return_address(0));                                   \
  }                                                                                                       \
  void __asan_load##N##_noabort(uintptr_t a) {                                                            \
    if (cudasim::counters::marked(a)) cudasim::counters::on_access(a, N, 0, __builtin_return_address(0)); \
  }                                                                                                       \
  void __asan_store##N##_noabort(uintptr_t a) {                                                           \
    if (cudasim::counters::marked(a)) cudasim::counters::on_access(a, N, 1, __builtin_return_address(0)); \
  }
CUDASIM_ACCESS(1)
CUDASIM_ACCESS(2)
CUDASIM_ACCESS(4)
CUDASIM_ACCESS(8)
CUDASIM_ACCESS(16)
#undef CUDASIM_ACCESS
void __asan_report_load_n_noabort(uintptr_t a, size_t n) {
  cudasim::counters::on_access(a, static_cast<uint32_t>(n), 0, __builtin_return_address(0));
}
void __asan_report_store_n_noabort(uintptr_t a, size_t n) {
  cudasim::counters::on_access(a, static_cast<uint32_t>(n), 1, __builtin_return_address(0));
}
void __asan_loadN_noabort(uintptr_t a, size_t n) {
  if (cudasim::counters::marked(a))
    cudasim::counters::on_access(a, static_cast<uint32_t>(n), 0, __builtin_return_address(0));
}
void __asan_storeN_noabort(uintptr_t a, size_t n) {
  if (cudasim::counters::marked(a))
    cudasim::counters::on_access(a, static_cast<uint32_t>(n), 1, __builtin_return_address(0));
}
void __asan_handle_no_return(void) {}
void __asan_before_dynamic_init(const char*) {}
void __asan_after_dynamic_init(void) {}
#endif

}  // extern "C"
