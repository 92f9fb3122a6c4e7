// The simulated GPU's cost counters seen from a program: the ops it ran while recording (kernel launches,
// library calls, copies), as numbers that can be summed and scaled. The simulator's functions are found with
// dlsym and hand the records over as JSON (the simulator is a layer of its own: nothing includes its headers),
// so programs built against NVIDIA's libraries link too (the counters are unavailable there).
#pragma once

#include <string>
#include <vector>

#include "runtime/formats/json.h"

namespace tandem {
namespace costmodel {

enum class OpKind { Kernel, Library, Copy };

// One op's counts (see TandemCudasimOp for each field's meaning); `launches` says how many ops it stands for
// once ops are merged or scaled.
struct OpCounts {
  OpKind kind = OpKind::Kernel;
  std::string name;       // kernel as launched, or API function
  std::string detail;     // kernel: file:line of the launch; library: operand shapes
  std::string op_class;   // library calls and copies: conv_fwd, gemm, copy_d2d, all_reduce, ...
  std::string precision;  // f32, tf32, f64, bf16, f16, or ""
  int device = 0;
  int ranks = 0, groups = 0;
  double launches = 1;
  double threads = 0, blocks = 0, block_threads = 0;
  double load_requests = 0, store_requests = 0, load_sectors = 0, store_sectors = 0;
  double load_bytes = 0, store_bytes = 0, distinct_load_sectors = 0, distinct_store_sectors = 0;
  double shared_requests = 0, shared_wavefronts = 0, atomics = 0, atomic_requests = 0;
  double barriers = 0, collectives = 0, flops = 0, bytes_read = 0, bytes_written = 0;
  // Reloaded sectors by reuse distance: bucket b holds distances below 2^(b+10) bytes (and at least 2^(b+9)
  // for b > 0).
  static constexpr int kReuseBuckets = 24;
  double reuse_load_sectors[kReuseBuckets] = {};

  // What identifies the same op across runs of the same program at other sizes: the kernel and its launch
  // site, or the call, its class, precision and groups (the model's rate for a call depends on all three).
  std::string key() const;
  // The numbers of this op times f (launches included).
  OpCounts scaled(double f) const;
  // Adds another op's numbers (launches included).
  void add(const OpCounts& o);
  // The op as a + f (b - a) number by number (a linear extrapolation for f > 1), but with b's launches: a
  // kernel runs as many times at any larger size (a reduction's passes may differ at smaller ones).
  static OpCounts extrapolate(const OpCounts& a, const OpCounts& b, double f);
};

// An op as JSON (every field; numbers exact) and back (ValueError naming a missing or mistyped field).
Json op_to_json(const OpCounts& op);
OpCounts op_from_json(const Json& j);

// Whether the counters exist (the program runs on the simulated GPU's libraries).
bool counters_available();
// Why they do not ("" when they do).
std::string counters_unavailable_reason();

// Records the ops that run while it lives. Dry: cuDNN and cuBLAS calls skip their arithmetic (their outputs
// stay as they were), for runs that only measure costs. Only one may live at a time.
class Recording {
 public:
  explicit Recording(bool dry = false);
  ~Recording();
  Recording(const Recording&) = delete;
  Recording& operator=(const Recording&) = delete;
  // Waits for every device's queued work, then returns the ops that finished since the last take().
  std::vector<OpCounts> take();
};

// While it lives, cuDNN and cuBLAS calls skip their arithmetic and nothing is recorded: the warm-up before a
// dry Recording (algorithm searches, allocator pools) at the speed of the hand-written kernels.
class SkipArithmetic {
 public:
  SkipArithmetic();
  ~SkipArithmetic();
  SkipArithmetic(const SkipArithmetic&) = delete;
  SkipArithmetic& operator=(const SkipArithmetic&) = delete;
};

}  // namespace costmodel
}  // namespace tandem
