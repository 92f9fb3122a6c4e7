// kernels_bench's cases, which also calibrate the cost model: one launch of a CUDA backend kernel
// (elementwise, reduction, softmax, copy) over n f32 elements on GPU 0, with the least bytes it must move.
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "runtime/memory/stream.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace costmodel {

// One case made for n elements: its operands (kept alive here), the launch and the bytes it must move.
struct KernelRun {
  std::vector<Tensor> operands;
  std::function<void(const Stream&)> launch;  // queues the kernel on the stream
  double bytes = 0;                           // least bytes read + written by one launch
};

struct KernelCase {
  std::string name;
  std::function<KernelRun(int64_t n)> make;  // operands on GPU 0 for n elements (a multiple of 2^16)
};

const std::vector<KernelCase>& kernel_cases();

}  // namespace costmodel
}  // namespace tandem
