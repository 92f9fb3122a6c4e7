// SM partitions of one GPU (virtual GPUs): green contexts through the driver API, or plain streams.
#pragma once

#include <vector>

#include "runtime/base/device.h"
#include "runtime/memory/stream.h"

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
// never linked). The shares are the largest equal ones the driver grants, keeping co-scheduled SMs together
// when that allows `count` of them, so SMs may be left over. A partition's first stream is probed (memory,
// events, a cuDNN convolution and a cuBLAS GEMM) before use. When green contexts are unavailable (driver older
// than 12.5, no equal split, a failed call or probe, or TANDEM_GREEN_CONTEXTS=0), every partition gets plain
// streams on the device, with sm_count = all SMs and green_context = false, and the reason is printed once
// per process on stderr. Throws ValueError when `count` is below 1 or above the GPU's SM count.
std::vector<SmPartition> make_sm_partitions(Device device, int count);

// Partition `index` alone, as make_sm_partitions(device, count)[index] is: one process of a multi-process run
// makes only its own green context and streams. Throws ValueError for an index outside [0, count).
SmPartition make_sm_partition(Device device, int count, int index);

// The number of SMs of CUDA device `device`.
int device_sm_count(Device device);

}  // namespace parallel
}  // namespace tandem
