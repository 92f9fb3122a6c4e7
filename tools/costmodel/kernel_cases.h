// What a kernels_bench case is, as the cost model records and calibrates it: one pass of an op over n f32
// elements on GPU 0 (elementwise, reduction, softmax, copy), or of a layer op (batch norm, ResNet's stem pooling,
// a layout copy) of [batch, 64, 56, 56], with the least bytes it must move. The cases themselves are op cases of
// the test harness at shapes of their own (tests/opbench/kernel_cases.h), so the list lives there, and the
// programs that run it (kernels_bench, the fit) are built with the tests' code.
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
  std::function<void(const Stream&)> launch;  // queues the pass's kernels on the stream
  double bytes = 0;                           // least bytes read + written by one launch
};

struct KernelCase {
  std::string name;
  // Operands on GPU 0 for the case's argument: n elements (a multiple of 2^16), or the batch of the layer
  // cases ([batch, 64, 56, 56]).
  std::function<KernelRun(int64_t arg)> make;
  std::string arg_name = "n";
  std::vector<int64_t> args = {int64_t{1} << 20, int64_t{1} << 26};  // what kernels_bench runs
  int64_t record_arg = int64_t{1} << 18;  // the cost model records at this and 4 times it, and extrapolates
};

}  // namespace costmodel
}  // namespace tandem
