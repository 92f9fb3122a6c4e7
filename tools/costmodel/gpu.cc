// The modelled GPUs' numbers and their sources.
#include "tools/costmodel/gpu.h"

#include "runtime/base/error.h"

namespace tandem {
namespace costmodel {

namespace {

// NVIDIA H100 Tensor Core GPU datasheet (H100 SXM column): 3.35 TB/s HBM3, 80 GB; FP32 67 TFLOPS, FP64 34
// TFLOPS, TF32 Tensor Core 989 and BF16 Tensor Core 1979 TFLOPS "with sparsity" (dense: half); NVLink
// 900 GB/s and PCIe Gen5 128 GB/s, both directions together. 132 SMs and 50 MB of L2 as PyTorch reported on
// the H100 lent here (/work/.library/device/KINDS.md, 2026-11-13); 1980 MHz, the SM clock nvidia-smi read
// under load on the H200 run (same processor). Copy: "a device-to-device copy moved about 3.0 TB/s
// counting bytes read and written" on that H100 (KINDS.md).
GpuSpec h100() {
  GpuSpec g;
  g.name = "h100";
  g.title = "NVIDIA H100 SXM5 80GB";
  g.sms = 132;
  g.clock_hz = 1.98e9;
  g.hbm_bytes_per_s = 3.35e12;
  g.copy_bytes_per_s = 3.0e12;
  g.l2_bytes = 50e6;
  g.memory_bytes = 80e9;
  g.f32_flops = 67e12;
  g.f64_flops = 34e12;
  g.tf32_flops = 989e12 / 2;
  g.bf16_flops = 1979e12 / 2;
  g.nvlink_bytes_per_s = 900e9 / 2;
  g.pcie_bytes_per_s = 128e9 / 2;
  return g;
}

// NVIDIA H200 Tensor Core GPU datasheet (H200 SXM column): 4.8 TB/s HBM3e, 141 GB; the same FP32, FP64,
// TF32 and BF16 rates as the H100 SXM; NVLink 900 GB/s, PCIe Gen5 128 GB/s. 132 SMs and 1980 MHz from the
// H200 run (shared/notes/gpu-run-h200.md); 60 MB of L2 as PyTorch reported on an H200 lent here (KINDS.md,
// 2026-10-28). Copy: 4271.8 GB/s, the 1 GiB device-to-device copy of kernels_bench on the H200 run.
GpuSpec h200() {
  GpuSpec g = h100();
  g.name = "h200";
  g.title = "NVIDIA H200 SXM 141GB";
  g.hbm_bytes_per_s = 4.8e12;
  g.copy_bytes_per_s = 4271.8e9;
  g.l2_bytes = 60e6;
  g.memory_bytes = 141e9;
  return g;
}

const std::vector<GpuSpec>& all() {
  static const std::vector<GpuSpec> specs = {h100(), h200()};
  return specs;
}

}  // namespace

double GpuSpec::flops_for(const std::string& precision) const {
  if (precision == "tf32") return tf32_flops;
  if (precision == "bf16" || precision == "f16") return bf16_flops;
  if (precision == "f64") return f64_flops;
  return f32_flops;
}

const GpuSpec& gpu_spec(const std::string& name) {
  std::string known;
  for (const GpuSpec& g : all()) {
    if (g.name == name) return g;
    known += (known.empty() ? "" : ", ") + g.name;
  }
  TD_THROW(ValueError, "unknown modelled GPU '", name, "' (known: ", known, ")");
}

std::vector<std::string> gpu_names() {
  std::vector<std::string> names;
  for (const GpuSpec& g : all()) names.push_back(g.name);
  return names;
}

GpuSpec partition(const GpuSpec& g, int parts) {
  TD_CHECK(parts >= 1, "a GPU splits into at least one partition, got ", parts);
  GpuSpec p = g;
  const double f = 1.0 / parts;
  p.partitions = g.partitions * parts;
  p.sms = g.sms / parts;
  p.hbm_bytes_per_s *= f;
  p.copy_bytes_per_s *= f;
  p.l2_bytes *= f;
  p.memory_bytes *= f;
  p.f32_flops *= f;
  p.f64_flops *= f;
  p.tf32_flops *= f;
  p.bf16_flops *= f;
  // Partitions exchange data through the GPU's own memory: a copy reads and writes it.
  p.nvlink_bytes_per_s = p.copy_bytes_per_s / 2;
  p.title = g.title + " (1/" + std::to_string(parts) + " SM partition)";
  return p;
}

}  // namespace costmodel
}  // namespace tandem
