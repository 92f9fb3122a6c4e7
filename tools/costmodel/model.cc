// An op's predicted time: the roofline of its counters on the modelled GPU (see model.h).
#include "tools/costmodel/model.h"

#include <algorithm>
#include <cmath>

namespace tandem {
namespace costmodel {

namespace {

// The blocks of a launch that run at once: as many as fit an SM's 2048 threads (at most 32), on every SM.
double resident_blocks(const OpCounts& per_launch, const GpuSpec& gpu) {
  const double per_sm = std::min(32.0, std::floor(2048.0 / std::max(1.0, per_launch.block_threads)));
  return std::max(1.0, std::min(per_launch.blocks, per_sm * gpu.sms));
}

// Device-memory bytes of one launch: distinct sectors once, and reloads whose reuse distance times the resident
// blocks exceeds the L2 (bucket b: distances between 2^(b+9) and 2^(b+10) bytes, taken at their geometric mean).
double dram_bytes(const OpCounts& k, const GpuSpec& gpu) {
  const double blocks = resident_blocks(k, gpu);
  double sectors = k.distinct_load_sectors + k.distinct_store_sectors;
  for (int b = 0; b < OpCounts::kReuseBuckets; ++b) {
    const double distance = std::ldexp(std::sqrt(2.0), b + 9);
    if (distance * blocks > gpu.l2_bytes) sectors += k.reuse_load_sectors[b];
  }
  return 32.0 * sectors;
}

OpTime longest(std::initializer_list<std::pair<double, const char*>> parts, double floor_s) {
  OpTime t;
  for (const auto& [s, name] : parts)
    if (s > t.seconds) {
      t.seconds = s;
      t.bound = name;
    }
  if (t.seconds < floor_s) t.bound = "floor";
  t.seconds += floor_s;
  return t;
}

OpTime kernel_time(const OpCounts& k, const GpuSpec& gpu, const Constants& c) {
  const double bytes = dram_bytes(k, gpu);
  const double warps_per_block = std::ceil(k.block_threads / 32.0);
  const double cycles = k.collectives * c.collective_cycles + k.barriers * warps_per_block * c.barrier_cycles +
                        k.shared_wavefronts * c.wavefront_cycles;
  OpTime t = longest({{bytes / (c.kernel_memory * gpu.copy_bytes_per_s), "memory"},
                      {k.flops / gpu.f32_flops, "arithmetic"},
                      {cycles / (gpu.sms * gpu.clock_hz), "sync"}},
                     c.launch_floor_s);
  t.dram_bytes = bytes;
  return t;
}

double library_efficiency(const OpCounts& op, const Constants& c) {
  if (op.op_class.rfind("conv_", 0) == 0) {
    const bool forward = op.op_class == "conv_fwd";
    if (op.groups > 1) return forward ? c.conv_grouped_fwd : c.conv_grouped_bwd;
    return forward ? c.conv_fwd : c.conv_bwd;
  }
  if (op.op_class == "gemm") return c.gemm;
  return 1.0;
}

OpTime library_time(const OpCounts& op, const GpuSpec& gpu, const Constants& c) {
  const double bytes = op.bytes_read + op.bytes_written;
  const std::string& k = op.op_class;
  if (k == "all_reduce" || k == "broadcast" || k == "all_gather" || k == "send" || k == "recv") {
    // Ring collectives move 2 (r - 1) / r of the buffer through each link (all-reduce), (r - 1) / r
    // (broadcast, all-gather); a message crosses one link.
    const double r = std::max(1, op.ranks);
    const double share = k == "all_reduce" ? 2 * (r - 1) / r : k == "send" || k == "recv" ? 1.0 : (r - 1) / r;
    const double moved = share * std::max(op.bytes_read, op.bytes_written);
    return longest({{moved / (c.link * gpu.nvlink_bytes_per_s), "link"}}, c.launch_floor_s);
  }
  // Grouped convolutions run on the CUDA cores whatever the math type permits: their rate is the f32 one.
  const double rate = gpu.flops_for(op.groups > 1 && op.precision == "tf32" ? "f32" : op.precision);
  OpTime t = longest({{op.flops / (library_efficiency(op, c) * rate), "arithmetic"},
                      {bytes / (c.library_memory * gpu.copy_bytes_per_s), "memory"}},
                     c.launch_floor_s);
  t.dram_bytes = bytes;
  return t;
}

OpTime copy_time(const OpCounts& op, const GpuSpec& gpu, const Constants& c) {
  const std::string& k = op.op_class;
  if (k == "copy_h2d" || k == "copy_d2h" || k == "copy_h2h")
    return longest({{op.bytes_written / gpu.pcie_bytes_per_s, "pcie"}}, c.launch_floor_s);
  if (k == "copy_peer") return longest({{op.bytes_written / gpu.nvlink_bytes_per_s, "link"}}, c.launch_floor_s);
  // A device copy or memset: its bytes at the measured copy bandwidth (read + written bytes per second).
  OpTime t = longest({{(op.bytes_read + op.bytes_written) / gpu.copy_bytes_per_s, "memory"}}, c.launch_floor_s);
  t.dram_bytes = op.bytes_read + op.bytes_written;
  return t;
}

}  // namespace

std::vector<std::pair<const char*, double>> named_constants(const Constants& c) {
  return {{"kernel_memory", c.kernel_memory},
          {"collective_cycles", c.collective_cycles},
          {"barrier_cycles", c.barrier_cycles},
          {"wavefront_cycles", c.wavefront_cycles},
          {"launch_floor_s", c.launch_floor_s},
          {"conv_fwd", c.conv_fwd},
          {"conv_bwd", c.conv_bwd},
          {"conv_grouped_fwd", c.conv_grouped_fwd},
          {"conv_grouped_bwd", c.conv_grouped_bwd},
          {"gemm", c.gemm},
          {"library_memory", c.library_memory},
          {"link", c.link},
          {"host_op_s", c.host_op_s}};
}

OpTime predict(const OpCounts& op, const GpuSpec& gpu, const Constants& c) {
  const double n = std::max(op.launches, 1e-9);
  const OpCounts one = op.scaled(1.0 / n);
  OpTime t = op.kind == OpKind::Kernel    ? kernel_time(one, gpu, c)
             : op.kind == OpKind::Library ? library_time(one, gpu, c)
                                          : copy_time(one, gpu, c);
  t.seconds *= n;
  t.dram_bytes *= n;
  return t;
}

double gpu_seconds(const std::vector<OpCounts>& ops, const GpuSpec& gpu, const Constants& c) {
  double s = 0;
  for (const OpCounts& op : ops) s += predict(op, gpu, c).seconds;
  return s;
}

double host_seconds(const std::vector<OpCounts>& ops, const Constants& c) {
  double launches = 0;
  for (const OpCounts& op : ops) launches += op.launches;
  return launches * c.host_op_s;
}

double host_bound_seconds(const std::vector<OpCounts>& ops, const GpuSpec& gpu, const Constants& c) {
  return std::max(gpu_seconds(ops, gpu, c), host_seconds(ops, c));
}

}  // namespace costmodel
}  // namespace tandem
