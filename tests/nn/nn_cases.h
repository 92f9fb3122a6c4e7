// The NN ops' cases for the op harness (tests/harness/op_harness.h), one list per family (nn_cases_*.cc).
#pragma once

#include <vector>

#include "runtime/nn/nn_ops.h"
#include "tests/harness/op_harness.h"

namespace tandem {
namespace testing {

std::vector<OpCase> conv_cases();            // conv2d: every option and CPU path, NCHW and channels-last
std::vector<OpCase> pool_cases();            // max/avg pooling (padding, ceil_mode, count_include_pad), global average
std::vector<OpCase> batch_norm_cases();      // training (with the running statistics' update) and evaluation
std::vector<OpCase> dropout_format_cases();  // dropout against the Philox mask; memory-format conversions

// Whether dropout keeps element i: value i of the Philox stream (seed, first counter), 32-bit uniform, is >= p.
bool philox_kept(uint64_t seed, uint64_t counter, int64_t i, double p);

}  // namespace testing
}  // namespace tandem
