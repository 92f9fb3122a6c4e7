// The stream checker's state (stream clocks, the live storages and their accesses, violations of frees not
// raised yet) and its rules.
#include "runtime/memory/stream_check.h"

#include <algorithm>
#include <cstdlib>
#include <map>
#include <mutex>
#include <sstream>
#include <thread>
#include <unordered_map>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/stream.h"

namespace tandem {
namespace stream_check {

namespace detail {
std::atomic<bool> g_enabled{false};
namespace {
const bool g_read_env = [] {
  const char* v = std::getenv("TANDEM_STREAM_CHECK");
  if (v != nullptr && std::string(v) == "1") g_enabled.store(true);
  return true;
}();
}  // namespace
}  // namespace detail

// Stream id -> the last access number of that stream known to be ordered before; sorted by id (a stream
// meets few others, so a short vector beats a map).
struct Clock {
  std::vector<std::pair<uint64_t, uint64_t>> entries;

  uint64_t get(uint64_t stream) const {
    auto it = std::lower_bound(entries.begin(), entries.end(), std::make_pair(stream, uint64_t{0}));
    return it != entries.end() && it->first == stream ? it->second : 0;
  }
  void raise(uint64_t stream, uint64_t seq) {
    auto it = std::lower_bound(entries.begin(), entries.end(), std::make_pair(stream, uint64_t{0}));
    if (it != entries.end() && it->first == stream)
      it->second = std::max(it->second, seq);
    else
      entries.insert(it, {stream, seq});
  }
  void merge(const Clock& o) {
    std::vector<std::pair<uint64_t, uint64_t>> out;
    out.reserve(entries.size() + o.entries.size());
    auto a = entries.cbegin();
    auto b = o.entries.cbegin();
    while (a != entries.cend() || b != o.entries.cend()) {
      if (b == o.entries.cend() || (a != entries.cend() && a->first < b->first)) {
        out.push_back(*a++);
      } else if (a == entries.cend() || b->first < a->first) {
        out.push_back(*b++);
      } else {
        out.emplace_back(a->first, std::max(a->second, b->second));
        ++a;
        ++b;
      }
    }
    entries = std::move(out);
  }
};

namespace {

thread_local std::shared_ptr<const std::string> tl_context;

struct StreamState {
  uint64_t id = 0;
  Device device;
  uint64_t seq = 0;         // number of this stream's last access
  Clock clock;              // includes (id, seq)
  uint64_t host_epoch = 0;  // the host clock's epoch last merged in
};

// One access of a storage: bytes [lo, hi) by access number `seq` of stream `stream`.
struct Record {
  uint64_t lo = 0, hi = 0;
  uint64_t stream = 0;
  uint64_t seq = 0;
  bool write = false;
  const char* op = "";
  std::shared_ptr<const std::string> context;
};

struct StorageState {
  uint64_t id = 0;
  uintptr_t base = 0;
  size_t nbytes = 0;
  Device device;
  MemoryCategory category;
  uint64_t stream = 0;  // allocation stream
  // The last writes and the reads since, by range; an access that an ordered one of a range containing it
  // supersedes is dropped (anything ordered after the newer one is ordered after it too).
  std::vector<Record> records;
};

struct Pending {
  std::thread::id thread;
  std::string message;
};

struct State {
  std::mutex mu;
  std::unordered_map<uint64_t, StreamState> streams;
  Clock host;
  uint64_t host_epoch = 0;
  std::map<uintptr_t, uint64_t> by_address;  // base -> storage id
  std::unordered_map<uint64_t, StorageState> storages;
  uint64_t next_storage = 1;  // never reset: ids stay unique across set_enabled
  std::vector<Pending> pending;
  std::unordered_map<uint64_t, std::string> names;  // stream id -> name
};

State& state() {
  static State* s = new State;  // leaked on purpose: storages are freed by static destructors too
  return *s;
}

bool is_host(const Stream& s) { return s.device().is_cpu() && s.id() == 0; }

void host_merge(State& st, const Clock& c) {
  st.host.merge(c);
  ++st.host_epoch;
}

// The stream's state, having inherited what the host learnt by synchronizing since it last issued work.
StreamState& stream_state(State& st, const Stream& stream) {
  auto it = st.streams.find(stream.id());
  if (it == st.streams.end()) {
    StreamState s;
    s.id = stream.id();
    s.device = stream.device();
    it = st.streams.emplace(s.id, std::move(s)).first;
  }
  StreamState& s = it->second;
  if (s.host_epoch != st.host_epoch) {
    s.clock.merge(st.host);
    s.host_epoch = st.host_epoch;
  }
  return s;
}

bool covered(const StreamState& me, const Record& r) { return r.stream == me.id || me.clock.get(r.stream) >= r.seq; }

std::string stream_name(const State& st, uint64_t id) {
  auto it = st.streams.find(id);
  const Device d = it != st.streams.end() ? it->second.device : Device::cpu();
  if (id == 0 && d.is_cpu()) return "the default cpu stream (the host)";
  std::string s = d.str() + " stream " + std::to_string(id);
  auto n = st.names.find(id);
  if (n != st.names.end()) s += " '" + n->second + "'";
  return s;
}

std::string storage_name(const State& st, const StorageState& s) {
  std::ostringstream os;
  os << "storage #" << s.id << " (" << s.nbytes << " bytes of " << category_name(s.category) << " on " << s.device
     << ", allocated on " << stream_name(st, s.stream) << ")";
  return os.str();
}

// "fill (a write of bytes [0, 64)) in 'worker 1 #3 ...' on cpu stream 7 'cpu#1 comm'"
std::string access_name(const State& st, const StorageState& s, const Record& r) {
  std::ostringstream os;
  os << r.op << " (a " << (r.write ? "write" : "read");
  if (r.lo != 0 || r.hi != s.nbytes) os << " of bytes [" << r.lo << ", " << r.hi << ")";
  os << ")";
  if (r.context) os << " in " << *r.context;
  os << " on " << stream_name(st, r.stream);
  return os.str();
}

[[noreturn]] void raise_conflict(const State& st, const StorageState& s, const Record& now, const Record& before) {
  const char* kind = now.write ? (before.write ? "write after write" : "write after read") : "read after write";
  const std::string earlier = stream_name(st, before.stream), current = stream_name(st, now.stream);
  TD_THROW(StreamOrderError, "stream order violation (", kind, ") on ", storage_name(st, s), ": ",
           access_name(st, s, now), " comes after ", access_name(st, s, before), ", and nothing orders that ",
           before.write ? "write" : "read", " before this ", now.write ? "write" : "read",
           ". Declare the order: record an Event on ", earlier, " after it and make ", current,
           " wait for it (Stream::wait), or synchronize ", earlier, " first");
}

std::string free_violation(const State& st, const StorageState& s, const Record& r) {
  const std::string user = stream_name(st, r.stream), owner = stream_name(st, s.stream);
  return "stream order violation (use before free) on " + storage_name(st, s) + ": it was freed on its allocation " +
         "stream, whose next allocations may reuse the memory, but nothing orders the earlier " +
         access_name(st, s, r) + " before the free. Declare it: call record_stream(" + user +
         ") on the storage where that stream starts using it, or make " + owner + " wait for an Event recorded on " +
         user + " after the access, before the last reference goes";
}

// Throws a violation of a free made by this thread (or by any thread, at a synchronization). The others pending
// are dropped: a run stops at its first violation, and frees while its stack unwinds would only repeat it.
void raise_pending(State& st, bool any_thread) {
  for (auto it = st.pending.begin(); it != st.pending.end(); ++it)
    if (any_thread || it->thread == std::this_thread::get_id()) {
      std::string message = std::move(it->message);
      st.pending.clear();
      TD_THROW(StreamOrderError, message);
    }
}

void add_record(StorageState& s, Record rec, const StreamState& me) {
  auto superseded = [&](const Record& r) {
    if (r.lo < rec.lo || r.hi > rec.hi) return false;
    // A write was checked to come after every access it overlaps; a read supersedes only reads before it.
    return rec.write || (!r.write && covered(me, r));
  };
  s.records.erase(std::remove_if(s.records.begin(), s.records.end(), superseded), s.records.end());
  s.records.push_back(std::move(rec));
}

}  // namespace

void set_enabled(bool on) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.streams.clear();
  st.host = Clock();
  st.host_epoch = 0;
  st.by_address.clear();
  st.storages.clear();
  st.pending.clear();
  detail::g_enabled.store(on);
}

void on_op(const char* op, const Stream& stream, const Access* accesses, size_t n) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  raise_pending(st, false);
  struct Hit {
    StorageState* storage;
    uint64_t lo, hi;
    bool write;
  };
  std::vector<Hit> hits;
  hits.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const Access& a = accesses[i];
    if (a.ptr == nullptr || a.bytes == 0) continue;
    const auto p = reinterpret_cast<uintptr_t>(a.ptr);
    auto it = st.by_address.upper_bound(p);
    if (it == st.by_address.begin()) continue;
    --it;
    StorageState& s = st.storages.at(it->second);
    if (p >= s.base + s.nbytes) continue;
    const uint64_t lo = a.bytes == kWholeStorage ? 0 : p - s.base;
    const uint64_t hi = a.bytes == kWholeStorage ? s.nbytes : std::min<uint64_t>(s.nbytes, lo + a.bytes);
    hits.push_back({&s, lo, hi, a.write});
  }
  if (hits.empty()) return;
  StreamState& me = stream_state(st, stream);
  Record now;
  now.stream = me.id;
  now.seq = me.seq + 1;
  now.op = op;
  now.context = tl_context;
  for (const Hit& h : hits)
    for (const Record& r : h.storage->records) {
      if (r.stream == me.id || !(r.write || h.write) || r.hi <= h.lo || h.hi <= r.lo || covered(me, r)) continue;
      now.lo = h.lo;
      now.hi = h.hi;
      now.write = h.write;
      raise_conflict(st, *h.storage, now, r);
    }
  me.seq = now.seq;
  me.clock.raise(me.id, me.seq);
  for (const Hit& h : hits) {
    now.lo = h.lo;
    now.hi = h.hi;
    now.write = h.write;
    add_record(*h.storage, now, me);
  }
  if (is_host(stream)) host_merge(st, me.clock);
}

uint64_t on_allocate(const void* data, size_t nbytes, Device device, MemoryCategory category, const Stream& stream) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  raise_pending(st, false);
  if (data == nullptr || nbytes == 0) return 0;
  StreamState& me = stream_state(st, stream);
  StorageState s;
  s.id = st.next_storage++;
  s.base = reinterpret_cast<uintptr_t>(data);
  s.nbytes = nbytes;
  s.device = device;
  s.category = category;
  s.stream = me.id;
  // The allocator hands the memory to this stream: other streams must be ordered after the allocation.
  me.clock.raise(me.id, ++me.seq);
  Record r;
  r.hi = nbytes;
  r.stream = me.id;
  r.seq = me.seq;
  r.write = true;
  r.op = "allocation";
  r.context = tl_context;
  s.records.push_back(std::move(r));
  st.by_address[s.base] = s.id;
  const uint64_t id = s.id;
  st.storages.emplace(id, std::move(s));
  if (is_host(stream)) host_merge(st, me.clock);
  return id;
}

void on_set_category(uint64_t id, MemoryCategory category) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  auto it = st.storages.find(id);
  if (it != st.storages.end()) it->second.category = category;
}

void on_free(uint64_t id, const Stream& stream, const std::vector<Stream>& used_on) noexcept {
  try {
    State& st = state();
    std::lock_guard<std::mutex> lock(st.mu);
    auto it = st.storages.find(id);
    if (it == st.storages.end()) return;
    StorageState s = std::move(it->second);
    st.storages.erase(it);
    st.by_address.erase(s.base);
    // As the free itself: the allocation stream first waits for the work queued so far on the recorded streams.
    StreamState& owner = stream_state(st, stream);
    for (const Stream& u : used_on) {
      const Clock c = stream_state(st, u).clock;
      owner.clock.merge(c);
    }
    if (is_host(stream)) host_merge(st, owner.clock);
    for (const Record& r : s.records)
      if (!covered(owner, r)) {
        st.pending.push_back({std::this_thread::get_id(), free_violation(st, s, r)});
        return;
      }
  } catch (...) {
    // Destructors never throw; the checker then misses this free.
  }
}

std::shared_ptr<const Clock> on_record(const Stream& stream) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  raise_pending(st, false);
  return std::make_shared<const Clock>(stream_state(st, stream).clock);
}

void on_wait(const Stream& stream, const Clock& recorded) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  raise_pending(st, false);
  StreamState& me = stream_state(st, stream);
  me.clock.merge(recorded);
  if (is_host(stream)) host_merge(st, me.clock);
}

void on_synchronize(const Stream& stream) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  raise_pending(st, true);
  const Clock c = stream_state(st, stream).clock;
  host_merge(st, c);
}

void on_synchronize(const Clock& recorded) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  raise_pending(st, true);
  host_merge(st, recorded);
}

void name_stream(const Stream& stream, const std::string& name) {
  State& st = state();
  std::lock_guard<std::mutex> lock(st.mu);
  st.names[stream.id()] = name;
}

std::shared_ptr<const std::string> current_context() { return tl_context; }
void set_current_context(std::shared_ptr<const std::string> what) { tl_context = std::move(what); }

Context::Context(std::string what) : previous_(tl_context) {
  tl_context = std::make_shared<const std::string>(std::move(what));
}
Context::~Context() { tl_context = previous_; }

}  // namespace stream_check
}  // namespace tandem
