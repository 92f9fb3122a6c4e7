// The profiler's device timer on a real GPU: CUPTI's activity API (kernel records, tied to the profiler's calls by
// external correlation ids), from the toolkit's libcupti loaded at run time, so that programs run without it.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/tensor/profiler.h"

namespace tandem {
namespace cuda {

// The libraries tried in order: $TANDEM_CUPTI_LIBRARY when set, else CUDA 13's libcupti on the loader's path
// (the GPU bundle's LD_LIBRARY_PATH: PyTorch's nvidia/*/lib, /usr/local/cuda) and in the toolkit.
std::vector<std::string> cupti_libraries();

// Loads the first of `libraries` that opens and has the entry points the timer uses; false with `why_not` (each
// library and the loader's error) when none does. Loads once per process: later calls return the first result.
bool load_cupti(const std::vector<std::string>& libraries, std::string* why_not);

// The DeviceTimerFactory registered for CUDA devices: null without a reason on the simulated GPU (host timers
// time it), null with the reason when CUPTI cannot be loaded or started.
std::unique_ptr<profiler::DeviceTimer> make_cupti_timer(Device device, std::string* why_not);

}  // namespace cuda
}  // namespace tandem
