// The cost model: an op's predicted time on a modelled GPU from its counters, and the constants fitted to
// measured runs (fitted.cc, written by tools/costmodel:fit from calibration.json).
//
// A kernel takes the longest of
//   memory  its device-memory bytes at a fraction of the GPU's measured copy bandwidth: every sector the launch
//           loads or stores once, plus the sectors a block loads again after touching more bytes in between
//           than its share of the L2 (the L2 divided among the blocks resident at once) holds;
//   arithmetic  its counted FLOPs at the GPU's peak rate for the precision;
//   sync    the cycles each SM spends, one after another, on its share of warp collectives, barrier arrivals
//           and shared-memory wavefronts (bank conflicts add wavefronts), at fitted cycles each: a stand-in for
//           the latency chains and instruction issue of reductions, which the simulator cannot time;
// plus a floor per launch. A library call (cuDNN, cuBLAS) takes its arithmetic at a fitted fraction of the
// peak rate for its kind of call, or its bytes at a fraction of the copy bandwidth, whichever is longer, plus
// the floor; copies and NCCL calls take their bytes at the copy, PCIe or NVLink bandwidth.
//
// The host spends host_op_s on each op it launches. Launches are asynchronous, so ops on one stream take the
// longer of their GPU time and their host time (host_bound_seconds): the host runs ahead of the GPU while its
// launches are quicker, and the GPU waits for them otherwise.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "tools/costmodel/counters.h"
#include "tools/costmodel/gpu.h"

namespace tandem {
namespace costmodel {

struct Constants {
  double kernel_memory = 0.9;     // kernels' device-memory bytes at this fraction of the copy bandwidth
  double collective_cycles = 0;   // per warp collective (shuffle, vote, __syncwarp), per SM
  double barrier_cycles = 0;      // per warp arriving at a __syncthreads, per SM
  double wavefront_cycles = 1;    // per shared-memory wavefront, per SM
  double launch_floor_s = 2e-6;   // every kernel, library call and copy takes at least this
  double conv_fwd = 0.5;          // cuDNN convolutions (groups == 1): fraction of the arithmetic rate
  double conv_bwd = 0.5;          //   backward data and backward filter
  double conv_grouped_fwd = 0.5;  // cuDNN grouped convolutions (depthwise ones): forward
  double conv_grouped_bwd = 0.5;  //   backward data and backward filter (other kernels than the forward's)
  double gemm = 0.8;              // cuBLAS GEMMs
  double library_memory = 0.9;    // library calls' bytes at this fraction of the copy bandwidth
  double link = 0.8;              // NCCL: fraction of the link bandwidth
  // The host's time per kernel launch, library call or copy, as Tandem at the calibration runs' commit spent it
  // with several worker threads launching through one process (fitted to the Pipe-BD run: calibration.h).
  double host_op_s = 0;
};

// The constants fitted last (fitted.cc).
const Constants& fitted_constants();
// Every constant with its field's name, in declaration order.
std::vector<std::pair<const char*, double>> named_constants(const Constants& c);

struct OpTime {
  double seconds = 0;
  std::string bound;      // what sets it: memory, arithmetic, sync, floor, link, pcie
  double dram_bytes = 0;  // device-memory bytes the model charges
};

// The predicted time of an op (all its launches) on `gpu`.
OpTime predict(const OpCounts& op, const GpuSpec& gpu, const Constants& c);

// The summed GPU time of ops on one stream, and the host's time to launch them (host_op_s each).
double gpu_seconds(const std::vector<OpCounts>& ops, const GpuSpec& gpu, const Constants& c);
double host_seconds(const std::vector<OpCounts>& ops, const Constants& c);
// The longer of the two: the time ops launched one after another by one host thread take.
double host_bound_seconds(const std::vector<OpCounts>& ops, const GpuSpec& gpu, const Constants& c);

}  // namespace costmodel
}  // namespace tandem
