// The simulated GPU's cost counters, inside the simulator: the record of finished ops, and the counting of a
// kernel launch's memory accesses, which the kernels' objects report through the instrumentation calls of
// GCC's -fsanitize=kernel-address (tools/bazel/cuda.bzl compiles the .cu files so in the simulator build).
//
// How accesses become warp-wide requests: the threads of a block run one after another between barriers and
// warp collectives, so the accesses of one warp instruction arrive from its lanes at different times. Each
// access is kept with its place in the code (the instrumentation call's return address) and its lane; when
// every lane has reached the same barrier or the end (or a warp's buffer is full), lane i's k-th access at a
// place is grouped with every other lane's k-th access at that place: one request. That is the hardware's
// grouping whenever the lanes run the same path; where they diverge, requests pair accesses by their count.
// A lane's accesses that follow each other over adjacent bytes of one aligned 16-byte piece count as one
// access: the host compiler splits the kernels' vector loads and stores into narrower ones (and so two scalar
// accesses of a lane to neighbouring elements count as one vector access).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "tools/cudasim/counters_abi.h"

namespace cudasim {
namespace counters {

// The mode set by tandem_cudasim_counting (TandemCudasimCounting), and what a mode does.
int mode();
inline bool records(int mode) { return mode == TANDEM_CUDASIM_COUNTING_ON || mode == TANDEM_CUDASIM_COUNTING_DRY; }
inline bool skips_arithmetic(int mode) {
  return mode == TANDEM_CUDASIM_COUNTING_DRY || mode == TANDEM_CUDASIM_COUNTING_SKIP;
}
// Appends a finished op to the record (nothing while counting is off).
void record(const TandemCudasimOp& op);
// An op as a JSON object (tandem_cudasim_take_ops_json's elements).
std::string to_json(const TandemCudasimOp& op);
// An op of a library call or copy with its name, operation class and costs.
TandemCudasimOp library_op(TandemCudasimOpKind kind, int device, uint64_t stream, const std::string& name,
                           const std::string& detail, const char* op_class, const char* precision, double flops,
                           double bytes_read, double bytes_written);

// The counts of one kernel launch, summed over the blocks as they finish (any host thread). A launch of more
// than kCountedBlocks blocks counts every k-th block only (k = blocks / kCountedBlocks, rounded up) and scales
// its counts by blocks / counted blocks: the blocks of a grid do alike, and counting costs more than running.
class Launch {
 public:
  static constexpr uint64_t kCountedBlocks = 64;
  Launch(const std::string& name, const std::string& site, int device, uint64_t stream, const uint32_t grid[3],
         const uint32_t block[3], uint64_t shared_bytes);
  bool counts_block(uint64_t block) const { return block % stride_ == 0; }
  // Adds a finished block's counts and the sectors it loaded and stored (sorted, distinct).
  void add(const TandemCudasimOp& block, const std::vector<uint64_t>& loaded, const std::vector<uint64_t>& stored);
  TandemCudasimOp finish();  // the launch's op, once every block was added

 private:
  std::mutex mu_;
  TandemCudasimOp op_;
  uint64_t stride_ = 1, counted_ = 0;
  std::map<uint64_t, uint64_t> loaded_, stored_;  // distinct sectors as [first, end) runs
};

// Called by the allocation registry, under its lock, for each allocation it adds or removes: while counting is
// on, device memory is marked so that the kernels' accesses to it are reported.
void allocation_changed(const void* base, size_t bytes, bool added);

// A block's sectors and the block's byte clock at their last touch (open addressing; clear() is O(1)).
class Touched {
 public:
  static constexpr uint64_t kNone = ~uint64_t{0};
  // Sets key's value; returns the previous one, or kNone.
  uint64_t exchange(uint64_t key, uint64_t value);
  void clear();

 private:
  size_t slot(uint64_t key) const;
  void grow();
  std::vector<uint64_t> keys_, values_;
  std::vector<uint32_t> stamps_;  // a slot is used when its stamp is the table's
  uint32_t stamp_ = 1;
  size_t used_ = 0;
};

// What one host thread counts while it runs blocks of a counted launch.
class BlockCounter {
 public:
  BlockCounter(Launch* launch, int threads_per_block);
  ~BlockCounter();
  BlockCounter(const BlockCounter&) = delete;
  BlockCounter& operator=(const BlockCounter&) = delete;
  void enter(int tid);  // thread `tid` of the block runs from now until leave()
  void leave();
  void barrier();     // every thread of the block passed a __syncthreads
  void collective();  // one warp completed a shuffle, vote or __syncwarp
  void end_block();   // the block finished: its counts go to the launch
  void flops(uint64_t n);
  // One access of the running thread at `site` to device memory or this host thread's static TLS (shared
  // memory); kind: 0 load, 1 store, 2 atomic.
  void access(uintptr_t addr, uint32_t size, int kind, uintptr_t site);

 private:
  struct Rec {
    uintptr_t site;
    uint64_t addr;
    uint32_t size;
    uint8_t lane;
    uint8_t kind;  // 0..2 global load, store, atomic; 3, 4 shared load, store
  };
  void flush(size_t warp);

  Launch* launch_;
  std::vector<std::vector<Rec>> warps_;
  std::vector<int64_t> last_;  // per thread: its last access in its warp's buffer (-1: none since the flush)
  TandemCudasimOp counts_;     // this block's
  std::vector<uint64_t> loaded_, stored_;
  Touched touched_;
  uint64_t clock_ = 0;  // bytes of sectors this block has touched
  // flush()'s scratch, kept between calls.
  struct Place {  // a place in the code that accesses one kind of memory, and its requests
    uintptr_t site;
    uint8_t kind;
    uint32_t n[32];             // accesses per lane so far
    size_t base;                // its first request's number
    std::vector<size_t> first;  // by ordinal: the request's first access in the buffer
  };
  std::vector<Place> places_;
  std::vector<uint32_t> req_of_, place_of_, start_, fill_;
  std::vector<uint64_t> flat_;
  std::vector<std::pair<size_t, uint32_t>> order_;
  std::vector<uint8_t> kind_of_;
  uintptr_t tls_lo_ = 0, tls_hi_ = 0;  // the host thread's static TLS, where __shared__ arrays live
};

}  // namespace counters
}  // namespace cudasim
