// SM partitions of one GPU (virtual GPUs): green contexts through the driver API, or plain streams.
#pragma once

#include <vector>

#include "runtime/device.h"
#include "runtime/stream.h"

namespace tandem {
namespace parallel {

struct SmPartition {
  Stream compute;
  Stream comm;
  int sm_count = 0;            // SMs the partition may use
  bool green_context = false;  // false: plain streams sharing all SMs of the GPU
};

// Splits CUDA device `device` into `count` partitions of equal SM counts, each a green context with its own
// compute and comm streams. The driver API is reached through cudaGetDriverEntryPointByVersion (libcuda is
// never linked). When green contexts are unavailable (driver older than 12.5, a failed call, or
// TANDEM_GREEN_CONTEXTS=0), every partition gets plain streams on the device, with sm_count = all SMs and
// green_context = false, and the reason is printed once per process on stderr. Throws ValueError when
// `count` is below 1 or above the GPU's SM count.
std::vector<SmPartition> make_sm_partitions(Device device, int count);

// The number of SMs of CUDA device `device`.
int device_sm_count(Device device);

}  // namespace parallel
}  // namespace tandem
