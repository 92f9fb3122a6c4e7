// CUPTI activity records as the profiler's device kernels: a kernel record's name, times and CUDA correlation id,
// tied through external-correlation records to the profiler's call that launched it (profiler.h, DeviceTimer).
#pragma once

#include <cupti_activity.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "runtime/tensor/profiler.h"

namespace tandem {
namespace cuda {

// The external-correlation kind the profiler pushes its call numbers as.
constexpr CUpti_ExternalCorrelationKind kProfilerCorrelation = CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM0;

// What the records of one profile said, on CUPTI's clock; other kinds of records are ignored.
struct CuptiRecords {
  struct Kernel {
    std::string name;
    uint32_t correlation = 0;
    uint64_t start = 0, end = 0;
    uint32_t stream = 0;
  };
  std::vector<Kernel> kernels;
  std::map<uint32_t, uint64_t> call_of;  // CUDA correlation id -> the profiler's call

  void add(const CUpti_Activity& record);
  // The kernels with their calls, `offset_ns` added to their times (CUPTI's clock to the steady clock).
  std::vector<profiler::DeviceKernel> device_kernels(int64_t offset_ns) const;
};

// A kernel's name as a table shows it: demangled, without its namespaces, return type and parameters
// ("binary_kernel<float, 4>"); a name that does not demangle (cuDNN's, extern "C") is kept as it is.
std::string kernel_display_name(const char* name);

}  // namespace cuda
}  // namespace tandem
