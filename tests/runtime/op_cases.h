// The op cases the harness runs, one list per family of ops (each in its own op_cases_*.cc).
#pragma once

#include <vector>

#include "tests/harness/op_harness.h"

namespace tandem {
namespace testing {

std::vector<OpCase> elementwise_cases();  // arithmetic, scalar ops, comparisons, unary functions, where
std::vector<OpCase> reduction_cases();    // sum/mean/amax/max/argmax, sum_to, softmax, log_softmax
std::vector<OpCase> linalg_cases();       // matmul, linear
std::vector<OpCase> join_index_cases();   // concat, split, chunk, index_select, gather, one_hot
std::vector<OpCase> view_copy_cases();    // Tensor views, contiguous/clone/to(dtype)/copy_/fill_

}  // namespace testing
}  // namespace tandem
