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

// The mode set by tandem_cudasim_counting (TandemCudasimCounting).
int mode();
// Appends a finished op to the record (nothing while counting is off).
void record(const TandemCudasimOp& op);
// An op of a library call or copy with its name, operation class and costs.
TandemCudasimOp library_op(TandemCudasimOpKind kind, int device, uint64_t stream, const std::string& name,
                           const std::string& detail, const char* op_class, const char* precision, double flops,
                           double bytes_read, double bytes_written);

// The counts of one kernel launch, summed over the blocks as they finish (any host thread).
class Launch {
 public:
  Launch(const std::string& name, const std::string& site, int device, uint64_t stream, const uint32_t grid[3],
         const uint32_t block[3], uint64_t shared_bytes);
  // Adds a finished block's counts and the sectors it loaded and stored (sorted, distinct).
  void add(const TandemCudasimOp& block, const std::vector<uint64_t>& loaded, const std::vector<uint64_t>& stored);
  TandemCudasimOp finish();  // the launch's op, once every block was added

 private:
  std::mutex mu_;
  TandemCudasimOp op_;
  std::map<uint64_t, uint64_t> loaded_, stored_;  // distinct sectors as [first, end) runs
};

// Called by the allocation registry, under its lock, for each allocation it adds or removes: while counting is
// on, device memory is marked so that the kernels' accesses to it are reported.
void allocation_changed(const void* base, size_t bytes, bool added);

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
  TandemCudasimOp counts_;  // this block's
  std::vector<uint64_t> loaded_, stored_;
  uintptr_t tls_lo_ = 0, tls_hi_ = 0;  // the host thread's static TLS, where __shared__ arrays live
};

}  // namespace counters
}  // namespace cudasim
