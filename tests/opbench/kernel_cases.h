// kernels_bench's cases, which also calibrate the cost model (tools/costmodel/kernel_cases.h): each is one pass of
// an op case of the harness (tests/opbench/case_families.h) at shapes of its own, on GPU 0. The cases over n f32
// elements (elementwise, reductions, softmax, copies) and the layer cases of [batch, 64, 56, 56] (batch norm,
// ResNet's stem pooling, layout copies) keep the names, shapes and bytes the H200 run measured.
#pragma once

#include <vector>

#include "tools/costmodel/kernel_cases.h"

namespace tandem {
namespace testing {

const std::vector<costmodel::KernelCase>& kernel_cases();

}  // namespace testing
}  // namespace tandem
