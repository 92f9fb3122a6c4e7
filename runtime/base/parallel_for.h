// parallel_for: splits a loop over host threads for CPU kernels (results never depend on the split).
#pragma once

#include <cstdint>
#include <functional>

namespace tandem {

// Threads a parallel_for called from this thread may use (default: TANDEM_NUM_THREADS, else the core count).
// Worker threads of the parallel layer set 1 so that workers, not loops, share the cores.
int intra_op_threads();
void set_intra_op_threads(int n);

// Calls fn(lo, hi) on disjoint ranges covering [begin, end), each at least `grain` long (except the last).
// Runs inline when one thread is allowed, the range is small, or when called from inside a parallel_for.
void parallel_for(int64_t begin, int64_t end, int64_t grain, const std::function<void(int64_t, int64_t)>& fn);

}  // namespace tandem
