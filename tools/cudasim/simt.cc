// The simulated GPU's kernel engine: every CUDA thread is a fiber (Boost.Context), the threads of a block
// run on one host thread and switch only at barriers and warp collectives, and blocks are spread over host
// threads and the SMs of the stream's device or green context.
#include <sys/mman.h>
#include <boost/context/detail/fcontext.hpp>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <cstdio>
#include <deque>
#include <memory>
#include <mutex>
#include <random>
#include <set>
#include <sstream>
#include <thread>
#include <vector>

#include "tools/cudasim/counters.h"
#include "tools/cudasim/race_hidden.h"
#include "tools/cudasim/sim.h"
#include "tools/cudasim/simt.h"
#include "tools/cudasim/state.h"

#if defined(__SANITIZE_ADDRESS__)
#include <sanitizer/asan_interface.h>
#include <sanitizer/common_interface_defs.h>
#define CUDASIM_ASAN_FIBERS 1
#endif
#if defined(__SANITIZE_THREAD__)
#include <sanitizer/tsan_interface.h>
#define CUDASIM_TSAN_FIBERS 1
#endif

namespace ctx = boost::context::detail;

namespace cudasim {
namespace simt {

thread_local const Coords* tl_coords __attribute__((tls_model("initial-exec"))) = nullptr;

namespace {

#if defined(CUDASIM_ASAN_FIBERS) || defined(CUDASIM_TSAN_FIBERS)
constexpr size_t kStackBytes = size_t{512} << 10;  // sanitizers' frames are larger
#else
constexpr size_t kStackBytes = size_t{128} << 10;
#endif
constexpr size_t kGuardBytes = 4096;
constexpr size_t kAsanCleanBytes = size_t{128} << 10;  // the part of a reused stack cleared under ASan

// A fiber stack with a guard page below it (an overflow faults instead of corrupting a neighbour).
struct Stack {
  char* mapping = nullptr;
  char* bottom() const { return mapping + kGuardBytes; }
  char* top() const { return mapping + kGuardBytes + kStackBytes; }
};

// Unmaps a fiber stack. Under AddressSanitizer its shadow is cleared first: the fibers' frames poisoned it, and
// memory mapped there later (a new thread's stack or TLS) would inherit the poison.
void free_stack(const Stack& s) {
#if defined(CUDASIM_ASAN_FIBERS)
  __asan_unpoison_memory_region(s.mapping, kStackBytes + kGuardBytes);
#endif
  munmap(s.mapping, kStackBytes + kGuardBytes);
}

Stack new_stack() {
  void* m = mmap(nullptr, kStackBytes + kGuardBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (m == MAP_FAILED) throw std::bad_alloc();
  mprotect(m, kGuardBytes, PROT_NONE);
  return Stack{static_cast<char*>(m)};
}

enum class State { NotStarted, Runnable, AtBarrier, AtWarp, Done };

struct Fiber {
  Coords coords;
  int tid = 0;  // linear thread index in the block
  State state = State::NotStarted;
  ctx::fcontext_t context = nullptr;
  Stack stack;
  bool has_stack = false;
  // Where it waits, and the collective's operands and result.
  const char* file = nullptr;
  int line = 0;
  WarpOp op = WarpOp::SyncWarp;
  unsigned mask = 0;
  uint64_t value = 0;
  int arg = 0;
  int width = 32;
  uint64_t result = 0;
  void* tsan = nullptr;  // its ThreadSanitizer fiber
};

// The block running on this host thread, and its scheduler's context.
struct BlockRun {
  Closure* closure = nullptr;
  std::vector<Fiber> fibers;
  std::vector<int> order;
  ctx::fcontext_t scheduler = nullptr;
  Fiber* current = nullptr;
  std::string fault;  // set by a thread that misused a collective; the block stops
  std::vector<Stack> free_stacks;
#if defined(CUDASIM_ASAN_FIBERS)
  void* scheduler_fake_stack = nullptr;
  const void* host_stack_bottom = nullptr;
  size_t host_stack_size = 0;
#endif
  void* tsan_host = nullptr;                  // the host thread's ThreadSanitizer context
  counters::BlockCounter* counter = nullptr;  // while the launch is counted
  char barrier_sync = 0;                      // addresses that ThreadSanitizer's release/acquire name
  char warp_sync[32] = {};
  char block_done = 0;
};
thread_local BlockRun* tl_run = nullptr;

// ThreadSanitizer's view of the engine (no-ops in other builds): each CUDA thread is a TSan fiber; switching
// between them creates no happens-before (a block's threads run concurrently on a GPU), a thread's start
// inherits the stream's history, barriers and warp collectives order their participants, the end of a block
// orders it before later work of its stream, and the engine's own bookkeeping is hidden.
namespace race {
#if defined(CUDASIM_TSAN_FIBERS)
void* current() { return __tsan_get_current_fiber(); }
void* create() { return __tsan_create_fiber(0); }
void destroy(void* f) { __tsan_destroy_fiber(f); }
void enter(void* f, bool first) { __tsan_switch_to_fiber(f, first ? 0 : __tsan_switch_to_fiber_no_sync); }
void leave(void* host) { __tsan_switch_to_fiber(host, __tsan_switch_to_fiber_no_sync); }
void release(void* addr) { __tsan_release(addr); }
void acquire(void* addr) { __tsan_acquire(addr); }
// Ends the fiber of a thread parked for good in a collective (which holds one Hidden scope open); what it did
// precedes `done`'s next acquire, as for a thread that finished.
void abandon(void* f, void* host, void* done) {
  enter(f, false);
  __tsan_release(done);
  __tsan_ignore_thread_end();
  leave(host);
  destroy(f);
}
#else
void* current() { return nullptr; }
void* create() { return nullptr; }
void destroy(void*) {}
void enter(void*, bool) {}
void leave(void*) {}
void release(void*) {}
void acquire(void*) {}
void abandon(void*, void*, void*) {}
#endif
using Hidden = RaceHidden;
}  // namespace race

// The order of runnable threads between barriers: TANDEM_CUDASIM_ORDER, or what a test set.
std::atomic<int> order_override{-1};
ThreadOrder thread_order() {
  const int o = order_override.load();
  return o < 0 ? config().order : static_cast<ThreadOrder>(o);
}

std::string dims(const uint3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}
std::string dims(const dim3& v) {
  return "(" + std::to_string(v.x) + "," + std::to_string(v.y) + "," + std::to_string(v.z) + ")";
}

const char* op_name(WarpOp op) {
  switch (op) {
    case WarpOp::ShflIdx: return "__shfl_sync";
    case WarpOp::ShflUp: return "__shfl_up_sync";
    case WarpOp::ShflDown: return "__shfl_down_sync";
    case WarpOp::ShflXor: return "__shfl_xor_sync";
    case WarpOp::Ballot: return "__ballot_sync";
    case WarpOp::Any: return "__any_sync";
    case WarpOp::All: return "__all_sync";
    case WarpOp::SyncWarp: return "__syncwarp";
  }
  return "?";
}

std::string site(const char* file, int line) { return std::string(file ? file : "?") + ":" + std::to_string(line); }

// Switches from a fiber back to the block's scheduler; returns when the scheduler resumes this fiber. The
// caller hides the engine from ThreadSanitizer (race::Hidden).
void yield_to_scheduler(bool finished) {
  BlockRun* run = tl_run;
#if defined(CUDASIM_ASAN_FIBERS)
  void* fake = nullptr;
  __sanitizer_start_switch_fiber(finished ? nullptr : &fake, run->host_stack_bottom, run->host_stack_size);
#endif
  race::leave(run->tsan_host);
  ctx::transfer_t back = ctx::jump_fcontext(run->scheduler, nullptr);
  run->scheduler = back.fctx;
#if defined(CUDASIM_ASAN_FIBERS)
  __sanitizer_finish_switch_fiber(fake, &run->host_stack_bottom, &run->host_stack_size);
#endif
  (void)finished;
}

void fiber_entry(ctx::transfer_t t) {
  Closure* closure;
  {
    race::Hidden hidden;
    tl_run->scheduler = t.fctx;
#if defined(CUDASIM_ASAN_FIBERS)
    __sanitizer_finish_switch_fiber(nullptr, &tl_run->host_stack_bottom, &tl_run->host_stack_size);
#endif
    closure = tl_run->closure;
  }
  closure->run(closure);  // the kernel: the only code of a fiber that ThreadSanitizer watches
  {
    race::Hidden hidden;
    race::release(&tl_run->block_done);
    static_cast<Fiber*>(t.data)->state = State::Done;
  }
  // Not hidden (a fiber must end with no ignore open), but it only reads what hidden code wrote.
  yield_to_scheduler(true);
  std::abort();  // a finished fiber is never resumed
}

// Runs fiber f until it finishes or waits at a collective (scheduler side: hidden by work_on).
void resume(BlockRun& run, Fiber& f) {
  const bool first = f.state == State::NotStarted;
  if (first) {
    if (!run.free_stacks.empty()) {
      f.stack = run.free_stacks.back();
      run.free_stacks.pop_back();
    } else {
      f.stack = new_stack();
    }
    f.has_stack = true;
#if defined(CUDASIM_ASAN_FIBERS)
    // The previous thread on this stack ended in frames that never returned (fiber_entry's), whose redzones
    // stay poisoned: clear the top of the stack, where the new thread's frames go.
    __asan_unpoison_memory_region(f.stack.top() - kAsanCleanBytes, kAsanCleanBytes);
#endif
    f.context = ctx::make_fcontext(f.stack.top(), kStackBytes, fiber_entry);
    if (f.tsan == nullptr) f.tsan = race::create();
  }
  f.state = State::Runnable;
  run.current = &f;
  tl_coords = &f.coords;
#if defined(CUDASIM_ASAN_FIBERS)
  __sanitizer_start_switch_fiber(&run.scheduler_fake_stack, f.stack.bottom(), kStackBytes);
#endif
  // The counter's per-host-thread state is the engine's: set before ThreadSanitizer sees the fiber (which
  // would take every thread's write of it for a race with the last one's).
  if (run.counter != nullptr) run.counter->enter(f.tid);
  race::enter(f.tsan, first);
  ctx::transfer_t back = ctx::jump_fcontext(f.context, &f);
  if (run.counter != nullptr) run.counter->leave();
#if defined(CUDASIM_ASAN_FIBERS)
  __sanitizer_finish_switch_fiber(run.scheduler_fake_stack, nullptr, nullptr);
#endif
  f.context = back.fctx;
  run.current = nullptr;
  tl_coords = nullptr;
  if (f.state == State::Done) {
#if defined(CUDASIM_TSAN_FIBERS)
    // A fresh stack per thread: ThreadSanitizer would take one thread's frames on a reused stack for a race
    // with the next thread's (unmapping resets its view of the memory).
    free_stack(f.stack);
#else
    run.free_stacks.push_back(f.stack);  // the next thread reuses it: only waiting threads hold stacks
#endif
    f.has_stack = false;
    race::destroy(f.tsan);
    f.tsan = nullptr;
  }
}

// Called by a fiber that misused a collective: the block stops, the kernel faults with `what`.
[[noreturn]] void fiber_fault(const std::string& what) {
  BlockRun* run = tl_run;
  if (run->fault.empty()) run->fault = what;
  run->current->state = State::AtBarrier;  // parked for good: the scheduler sees the fault first
  yield_to_scheduler(false);
  std::abort();
}

std::string thread_name(const Fiber& f) {
  return "thread " + dims(f.coords.thread) + " of block " + dims(f.coords.block);
}

// Completes the warp collective of the lanes of warp `w` if they all arrived; "" or a fault message.
// *completed says whether it did.
std::string try_warp(BlockRun& run, int w, bool* completed) {
  *completed = false;
  const int n = static_cast<int>(run.fibers.size());
  const int first = w * 32;
  const int lanes = std::min(32, n - first);
  Fiber* leader = nullptr;
  for (int l = 0; l < lanes; ++l) {
    Fiber& f = run.fibers[static_cast<size_t>(first + l)];
    if (f.state == State::AtWarp) {
      leader = &f;
      break;
    }
  }
  if (leader == nullptr) return "";
  const unsigned mask = leader->mask;
  // Every lane named by the mask must wait at the same collective with the same mask.
  for (int l = 0; l < 32; ++l) {
    if ((mask >> l & 1u) == 0) continue;
    if (l >= lanes)
      return std::string(op_name(leader->op)) + " at " + site(leader->file, leader->line) + ": its mask 0x" +
             [&] {
               std::ostringstream os;
               os << std::hex << mask;
               return os.str();
             }() +
             " names lane " + std::to_string(l) + ", which does not exist in this block of " + std::to_string(n) +
             " threads";
    Fiber& f = run.fibers[static_cast<size_t>(first + l)];
    if (f.state == State::Done)
      return std::string(op_name(leader->op)) + " at " + site(leader->file, leader->line) + ": its mask names lane " +
             std::to_string(l) + " (" + thread_name(f) + "), which has exited";
    if (f.state == State::AtBarrier)
      return std::string(op_name(leader->op)) + " at " + site(leader->file, leader->line) + " waits for lane " +
             std::to_string(l) + " (" + thread_name(f) + "), which waits at __syncthreads at " + site(f.file, f.line) +
             ": a deadlock";
    if (f.state != State::AtWarp) return "";  // still running: it may yet arrive
    if (f.op != leader->op || f.mask != mask)
      return thread_name(*leader) + " is at " + op_name(leader->op) + " (" + site(leader->file, leader->line) +
             ") while lane " + std::to_string(l) + " named by its mask is at " + op_name(f.op) + " (" +
             site(f.file, f.line) + ") with " + (f.mask != mask ? "another mask" : "the same mask");
  }
  // All arrived: compute the results per PTX (shfl.sync's segment mask from the width, clamp, own value
  // when the source lane is out of the segment).
  uint64_t ballot = 0;
  for (int l = 0; l < 32; ++l)
    if ((mask >> l & 1u) && run.fibers[static_cast<size_t>(first + l)].value) ballot |= 1ull << l;
  for (int l = 0; l < 32; ++l) {
    if ((mask >> l & 1u) == 0) continue;
    Fiber& f = run.fibers[static_cast<size_t>(first + l)];
    switch (f.op) {
      case WarpOp::Ballot: f.result = ballot; break;
      case WarpOp::Any: f.result = ballot != 0; break;
      case WarpOp::All: f.result = ballot == (mask & 0xffffffffull); break;
      case WarpOp::SyncWarp: f.result = 0; break;
      default: {
        const int segmask = (32 - f.width) & 0x1f;
        const int clamp = f.op == WarpOp::ShflUp ? 0 : 0x1f;
        const int max_lane = (l & segmask) | (clamp & ~segmask);
        const int min_lane = l & segmask;
        int j = l;
        bool in = false;
        const int b = f.arg;
        switch (f.op) {
          case WarpOp::ShflIdx:
            j = min_lane | (b & ~segmask & 0x1f);
            in = j <= max_lane;
            break;
          case WarpOp::ShflUp:
            j = l - b;
            in = j >= max_lane;
            break;
          case WarpOp::ShflDown:
            j = l + b;
            in = j <= max_lane;
            break;
          case WarpOp::ShflXor:
            j = l ^ b;
            in = j <= max_lane;
            break;
          default: break;
        }
        if (!in) j = l;
        if (j < 0 || j > 31 || (mask >> j & 1u) == 0) {
          f.result = ~0ull;  // undefined in CUDA: a value no kernel should use (NaN for floats)
        } else {
          f.result = run.fibers[static_cast<size_t>(first + j)].value;
        }
      }
    }
  }
  for (int l = 0; l < 32; ++l)
    if (mask >> l & 1u) run.fibers[static_cast<size_t>(first + l)].state = State::Runnable;
  *completed = true;
  if (run.counter != nullptr) run.counter->collective();
  return "";
}

// Runs one block to completion; returns "" or what it faulted on.
std::string run_block(BlockRun& run) {
  const size_t n = run.fibers.size();
  for (;;) {
    for (int t : run.order) {
      Fiber& f = run.fibers[static_cast<size_t>(t)];
      if (f.state == State::NotStarted || f.state == State::Runnable) resume(run, f);
      if (!run.fault.empty()) return run.fault;
    }
    bool any_warp = false, all_done = true;
    for (const Fiber& f : run.fibers) {
      if (f.state == State::AtWarp) any_warp = true;
      if (f.state != State::Done) all_done = false;
    }
    if (all_done) return "";
    if (any_warp) {
      bool progress = false;
      for (size_t w = 0; w * 32 < n; ++w) {
        bool completed = false;
        std::string bad = try_warp(run, static_cast<int>(w), &completed);
        if (!bad.empty()) return bad;
        progress |= completed;
      }
      if (progress) continue;
      for (const Fiber& f : run.fibers)
        if (f.state == State::AtWarp)
          return thread_name(f) + " waits at " + op_name(f.op) + " (" + site(f.file, f.line) +
                 ") for lanes that never arrive: a deadlock";
    }
    // Every thread left waits at __syncthreads: all of the block must be there, at the same one.
    const Fiber* first = nullptr;
    for (const Fiber& f : run.fibers) {
      if (f.state == State::Done) continue;
      if (first == nullptr) first = &f;
      if (f.file != first->file || f.line != first->line)
        return "divergent __syncthreads: " + thread_name(*first) + " waits at " + site(first->file, first->line) +
               " and " + thread_name(f) + " at " + site(f.file, f.line);
    }
    for (const Fiber& f : run.fibers)
      if (f.state == State::Done)
        return "__syncthreads at " + site(first->file, first->line) +
               " is not reached by every thread of the block: " + thread_name(f) + " has exited";
    for (Fiber& f : run.fibers) f.state = State::Runnable;
    if (run.counter != nullptr) run.counter->barrier();
  }
}

// ---- grids: blocks spread over host threads and SMs ----

struct Grid {
  std::string name;  // "kernel at file:line"
  Closure* closure = nullptr;
  dim3 grid, block;
  int device = 0;
  std::vector<int> sms;
  uint64_t launch_index = 0;
  uint64_t blocks = 0;
  std::atomic<uint64_t> next{0};
  std::atomic<uint64_t> finished{0};
  std::atomic<bool> failed{false};
  std::mutex mu;
  std::string fault;
  std::shared_ptr<counters::Launch> counting;  // null unless counting was on at the launch
};

// Runs blocks of `g` until none is left to claim.
void work_on(Grid& g) {
  race::Hidden hidden;  // the scheduler's side of the engine
  BlockRun run;
  const size_t threads = static_cast<size_t>(g.block.x) * g.block.y * g.block.z;
  run.closure = g.closure;
  run.fibers.resize(threads);
  run.order.resize(threads);
  for (size_t i = 0; i < threads; ++i) run.order[i] = static_cast<int>(i);
  if (thread_order() == ThreadOrder::Reverse) std::reverse(run.order.begin(), run.order.end());
  std::unique_ptr<counters::BlockCounter> counter;
  if (g.counting) counter = std::make_unique<counters::BlockCounter>(g.counting.get(), static_cast<int>(threads));
  run.counter = counter.get();
  BlockRun* saved = tl_run;
  tl_run = &run;
  run.tsan_host = race::current();
  DeviceState& d = device_state(g.device);
  for (;;) {
    const uint64_t b = g.next++;
    if (b >= g.blocks) break;
    if (!g.failed) {
      const uint3 block_idx{static_cast<unsigned>(b % g.grid.x), static_cast<unsigned>(b / g.grid.x % g.grid.y),
                            static_cast<unsigned>(b / g.grid.x / g.grid.y)};
      for (size_t i = 0; i < threads; ++i) {
        Fiber& f = run.fibers[i];
        f.state = State::NotStarted;
        f.tid = static_cast<int>(i);
        f.coords.thread = uint3{static_cast<unsigned>(i % g.block.x), static_cast<unsigned>(i / g.block.x % g.block.y),
                                static_cast<unsigned>(i / g.block.x / g.block.y)};
        f.coords.block = block_idx;
        f.coords.block_dim = g.block;
        f.coords.grid_dim = g.grid;
      }
      run.counter = counter != nullptr && g.counting->counts_block(b) ? counter.get() : nullptr;
      if (thread_order() == ThreadOrder::Random) {
        std::mt19937_64 rng(config().order_seed * 1000003u + g.launch_index * 7919u + b);
        std::shuffle(run.order.begin(), run.order.end(), rng);
      }
      const int sm = g.sms[static_cast<size_t>(b % g.sms.size())];
      d.sm_blocks[static_cast<size_t>(sm)]++;
      run.fault.clear();
      std::string bad = run_block(run);
      race::acquire(&run.block_done);  // what the block did precedes the stream's later work
      if (run.counter != nullptr) run.counter->end_block();
      if (!bad.empty()) {
        // Threads still parked hold stacks: take them back (their frames hold no resources). Their frames
        // never returned, so AddressSanitizer's redzones in them are cleared by hand.
        for (Fiber& f : run.fibers) {
          if (f.has_stack) {
#if defined(CUDASIM_ASAN_FIBERS)
            __asan_unpoison_memory_region(f.stack.bottom(), kStackBytes);
#endif
            run.free_stacks.push_back(f.stack);
            f.has_stack = false;
          }
          if (f.tsan != nullptr) {
            if (f.state == State::AtBarrier || f.state == State::AtWarp)
              race::abandon(f.tsan, run.tsan_host, &run.block_done);
            else
              race::destroy(f.tsan);
            f.tsan = nullptr;
          }
        }
        race::acquire(&run.block_done);
        std::lock_guard<std::mutex> lock(g.mu);
        if (!g.failed) {
          g.fault = "block " + dims(block_idx) + ": " + bad;
          g.failed = true;
        }
      }
    }
    g.finished++;
  }
  for (Stack& s : run.free_stacks) free_stack(s);
  tl_run = saved;
  notify_all();
}

// Host threads that help the stream threads run blocks.
class BlockPool {
 public:
  static BlockPool& get() {
    static BlockPool* pool = new BlockPool(config().host_threads - 1);
    return *pool;
  }
  void post(const std::shared_ptr<Grid>& g) {
    if (helpers_ == 0) return;
    {
      std::lock_guard<std::mutex> lock(mu_);
      grids_.push_back(g);
    }
    cv_.notify_all();
  }
  void retract(const std::shared_ptr<Grid>& g) {
    std::lock_guard<std::mutex> lock(mu_);
    for (auto it = grids_.begin(); it != grids_.end(); ++it) {
      if (it->get() == g.get()) {
        grids_.erase(it);
        return;
      }
    }
  }

 private:
  explicit BlockPool(int helpers) : helpers_(helpers) {
    for (int i = 0; i < helpers; ++i) std::thread([this] { loop(); }).detach();
  }
  void loop() {
    for (;;) {
      std::shared_ptr<Grid> g;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [&] { return !grids_.empty(); });
        g = grids_.front();
        if (g->next.load() >= g->blocks) {
          grids_.pop_front();
          continue;
        }
      }
      set_current_device(g->device);
      work_on(*g);
    }
  }
  int helpers_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Grid>> grids_;
};

std::atomic<uint64_t> launches{0};

// Runs a whole grid on the calling stream thread with the pool's help; throws Fault if it faulted.
void run_grid(const std::shared_ptr<Grid>& g) {
  if (g->blocks > 1) BlockPool::get().post(g);
  work_on(*g);
  host_wait([&] { return g->finished.load() >= g->blocks; });
  BlockPool::get().retract(g);
  if (g->failed) fault(cudaErrorLaunchFailure, "kernel " + g->name + ": " + g->fault);
  if (g->counting) counters::record(g->counting->finish());
}

std::string launch_error(const dim3& grid, const dim3& block, size_t shared_bytes) {
  std::ostringstream os;
  const uint64_t threads = static_cast<uint64_t>(block.x) * block.y * block.z;
  if (block.x == 0 || block.y == 0 || block.z == 0 || grid.x == 0 || grid.y == 0 || grid.z == 0) {
    os << "a grid " << dims(grid) << " or block " << dims(block) << " with a zero dimension";
  } else if (block.x > 1024 || block.y > 1024 || block.z > 64 || threads > kMaxThreadsPerBlock) {
    os << "a block of " << dims(block) << " = " << threads << " threads (at most 1024, and (1024, 1024, 64) per dim)";
  } else if (grid.x > 2147483647u || grid.y > 65535 || grid.z > 65535) {
    os << "a grid of " << dims(grid) << " blocks (at most (2^31-1, 65535, 65535))";
  } else if (shared_bytes > kSharedMemPerBlock) {
    os << shared_bytes << " bytes of dynamic shared memory (at most " << kSharedMemPerBlock
       << " without cudaFuncSetAttribute)";
  }
  return os.str();
}

}  // namespace

// A barrier orders what every thread did before it before what any does after it: each thread releases at
// arrival and acquires when it resumes, after all have arrived (for ThreadSanitizer; a no-op elsewhere).
void barrier(const char* file, int line) {
  race::Hidden hidden;
  BlockRun* run = tl_run;
  if (run == nullptr || run->current == nullptr) std::abort();  // not inside a simulated kernel
  Fiber& f = *run->current;
  f.state = State::AtBarrier;
  f.file = file;
  f.line = line;
  race::release(&run->barrier_sync);
  yield_to_scheduler(false);
  race::acquire(&tl_run->barrier_sync);
}

uint64_t warp(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line) {
  race::Hidden hidden;
  BlockRun* run = tl_run;
  if (run == nullptr || run->current == nullptr) std::abort();
  Fiber& f = *run->current;
  const int lane = f.tid % 32;
  if ((mask >> lane & 1u) == 0) {
    std::ostringstream os;
    os << op_name(op) << " at " << site(file, line) << ": " << thread_name(f) << " (lane " << lane
       << ") is not in its own mask 0x" << std::hex << mask;
    fiber_fault(os.str());
  }
  if (width < 1 || width > 32 || (width & (width - 1)) != 0)
    fiber_fault(std::string(op_name(op)) + " at " + site(file, line) + ": width " + std::to_string(width) +
                " is not a power of two from 1 to 32");
  f.state = State::AtWarp;
  f.op = op;
  f.mask = mask;
  f.value = value;
  f.arg = arg;
  f.width = width;
  f.file = file;
  f.line = line;
  char* sync = &run->warp_sync[(f.tid / 32) % 32];
  race::release(sync);
  yield_to_scheduler(false);
  race::acquire(sync);
  return f.result;
}

void launch(const char* kernel, const char* file, int line, const void* function, dim3 grid, dim3 block,
            size_t shared_bytes, cudaStream_t stream, Closure* closure) {
  std::unique_ptr<Closure, void (*)(Closure*)> owned(closure, [](Closure* c) { c->destroy(c); });
  count_call(std::string("kernel ") + kernel);
  const std::string name = std::string(kernel) + " at " + site(file, line);
  cudaError_t err;
  StreamImpl* s = resolve_stream(stream, &err);
  if (s == nullptr) {
    set_error(err, "launch of kernel " + name + ": the stream cannot be used");
    return;
  }
  if (stream_device(s) != current_device()) {
    set_error(cudaErrorInvalidResourceHandle,
              "launch of kernel " + name + " on a stream of cuda:" + std::to_string(stream_device(s)) +
                  " while the current device is cuda:" + std::to_string(current_device()));
    return;
  }
  std::string bad = launch_error(grid, block, shared_bytes);
  if (!bad.empty()) {
    set_error(shared_bytes > kSharedMemPerBlock ? cudaErrorInvalidValue : cudaErrorInvalidConfiguration,
              "launch of kernel " + name + " with " + bad);
    return;
  }
  if (!load_kernel(stream_device(s), function, "the first launch of kernel " + name + ", which loads it,")) {
    set_error(sticky_error(stream_device(s)));
    return;
  }
  auto g = std::make_shared<Grid>();
  g->name = name;
  g->grid = grid;
  g->block = block;
  g->device = stream_device(s);
  g->sms = stream_sms(s);
  g->launch_index = launches++;
  g->blocks = static_cast<uint64_t>(grid.x) * grid.y * grid.z;
  if (counters::records(counters::mode())) {
    const uint32_t gd[3] = {grid.x, grid.y, grid.z}, bd[3] = {block.x, block.y, block.z};
    g->counting = std::make_shared<counters::Launch>(kernel, site(file, line), g->device, s->id, gd, bd, shared_bytes);
  }
  // Pointers into memory this device may not access fault when the kernel runs (asynchronously, sticky).
  // Pool blocks they point into must hold, while the kernel runs, the allocation they held at its launch.
  std::vector<PoolUse> uses;
  std::string pointer_fault = check_kernel_pointers(g->device, closure->params, closure->params_bytes, &uses);
  auto shared_closure = std::shared_ptr<Closure>(owned.release(), [](Closure* c) { c->destroy(c); });
  g->closure = shared_closure.get();
  enqueue(s, "kernel " + name, [g, s, shared_closure, pointer_fault, uses = std::move(uses)] {
    if (!pointer_fault.empty()) fault(cudaErrorIllegalAddress, "kernel " + g->name + ": " + pointer_fault);
    check_pool_uses(uses, s, "kernel " + g->name);
    // Each run claims the blocks of a fresh grid: a graph node runs its launch again at every replay.
    auto run = std::make_shared<Grid>();
    run->name = g->name;
    run->closure = g->closure;
    run->grid = g->grid;
    run->block = g->block;
    run->device = g->device;
    run->sms = g->sms;
    run->launch_index = g->launch_index;
    run->blocks = g->blocks;
    run->counting = g->counting;  // the cost model's counters of this launch (a graph's replays reuse its record)
    run_grid(run);
    check_pool_uses(uses, s, "kernel " + g->name);
  });
}

}  // namespace simt

bool load_kernel(int device, const void* fn, const std::string& who) {
  // Never freed: loads may come from threads that outlive static destruction.
  static std::mutex& mu = *new std::mutex();
  static std::set<std::pair<int, const void*>>& loaded = *new std::set<std::pair<int, const void*>>();
  {
    std::lock_guard<std::mutex> lock(mu);
    if (loaded.count({device, fn}) != 0) return true;
  }
  if (!wait_device_idle(device, who)) return false;
  std::lock_guard<std::mutex> lock(mu);
  loaded.insert({device, fn});
  return true;
}

}  // namespace cudasim

extern "C" {

// Sets the order of runnable threads for later launches (0 forward, 1 reverse, 2 random; -1: the
// environment's), so that one test can run a kernel in every order.
void tandem_cudasim_set_thread_order(int order) { cudasim::simt::order_override = order; }

// Blocks each SM of a device has run so far (tests check that a green context's kernels stay on its SMs).
unsigned long long tandem_cudasim_sm_blocks(int device, int sm) {
  if (device < 0 || device >= cudasim::device_count() || sm < 0 || sm >= cudasim::config().sms) return 0;
  return cudasim::device_state(device).sm_blocks[static_cast<size_t>(sm)].load();
}

}  // extern "C"
