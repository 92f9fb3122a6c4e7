// Ops recorded on the simulated GPU together with the kernel profiler's op (the innermost ProfileScope) of the
// call that launched each, so that predictions line up with a profile's op rows (profile_compare.h).
#pragma once

#include <functional>
#include <map>
#include <string>
#include <vector>

#include "tools/costmodel/counters.h"

namespace tandem {
namespace costmodel {

// Recorded ops by the profiler's op that launched them (profiler::kNoOp: outside every scope or kernel call).
using OpsByOp = std::map<std::string, std::vector<OpCounts>>;

// Runs work() while recording (dry: cuDNN and cuBLAS skip their arithmetic) under a profile of GPU 0, and
// returns the ops it queued by op. One thread must launch them: an op is filed under the kernel call open
// when it finished. Throws ValueError while another profile runs.
OpsByOp record_by_op(const std::function<void()>& work, bool dry);

// The ops of each op at size `target` from runs at sizes a < b (scaling.h's extrapolate, op by op; an op
// missing from one run counts zero there).
OpsByOp extrapolate_by_op(const OpsByOp& at_a, double a, const OpsByOp& at_b, double b, double target);

// Every op's ops in one list (by op name, each in recorded order).
std::vector<OpCounts> all_ops(const OpsByOp& by_op);

}  // namespace costmodel
}  // namespace tandem
