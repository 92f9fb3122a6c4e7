// The modelled GPUs: each one's published rates and sizes and the copy bandwidth measured on it, in one place
// (gpu.cc says where every number comes from), and the share of a GPU that one of its SM partitions gets.
#pragma once

#include <string>
#include <vector>

namespace tandem {
namespace costmodel {

struct GpuSpec {
  std::string name;   // "h100", "h200"
  std::string title;  // "NVIDIA H100 SXM5 80GB"
  int sms = 0;
  double clock_hz = 0;         // SM clock under load
  double hbm_bytes_per_s = 0;  // peak device-memory bandwidth (datasheet)
  // A large device-to-device cudaMemcpyAsync, bytes read + written per second, as measured on the GPU: the
  // bandwidth the model's memory efficiencies are fractions of.
  double copy_bytes_per_s = 0;
  double l2_bytes = 0;
  double memory_bytes = 0;
  // Dense arithmetic rates, FLOP/s (an FMA is two).
  double f32_flops = 0, f64_flops = 0, tf32_flops = 0, bf16_flops = 0;
  double nvlink_bytes_per_s = 0;  // one direction, one GPU
  double pcie_bytes_per_s = 0;    // one direction
  int partitions = 1;             // > 1: one of this many SM partitions of the GPU working at once

  // The arithmetic rate for a precision ("f32", "tf32", "bf16", "f16", "f64"; "" is f32).
  double flops_for(const std::string& precision) const;
};

// The modelled GPU of this name (h100, h200); ValueError naming the known ones otherwise.
const GpuSpec& gpu_spec(const std::string& name);
std::vector<std::string> gpu_names();

// One of `parts` SM partitions (green contexts) of g, all working at once: 1/parts of the SMs, of the
// arithmetic, of the memory bandwidth and of the L2 (they share the memory system); links between partitions
// are copies within the GPU's memory.
GpuSpec partition(const GpuSpec& g, int parts);

}  // namespace costmodel
}  // namespace tandem
