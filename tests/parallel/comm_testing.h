// Helpers for the communicator tests: per-rank random inputs, rank-order reference sums, local groups, a ring of
// tagged messages.
#pragma once

#include <functional>
#include <vector>

#include "parallel/communicator.h"
#include "parallel/worker.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace parallel {
namespace testing {

// Runs fn(worker, comm) on `n` CPU workers sharing a local group (rethrows like run_on_workers).
void run_local(int n, const std::function<void(Worker&, Communicator&)>& fn,
               MessageMatching matching = MessageMatching::ByTag);

// Rank `rank`'s input of a test: random values from (seed, rank), never all zero. Floating dtypes hold
// normal values; integers small ones (0..49), so that sums of a few ranks never overflow.
Tensor rank_input(uint64_t seed, int rank, const Shape& shape, DType dtype, Device device = Device::cpu());

// What every backend's all_reduce must give, written independently of them: inputs added one rank after
// the other in f32 (f16/bf16/f32), f64 or i64, the sum times `scale` formed in f64 and rounded once.
Tensor rank_order_sum_reference(const std::vector<Tensor>& inputs, double scale);

// The same sum in double precision, as a second check of the values.
std::vector<double> exact_sum(const std::vector<Tensor>& inputs, double scale);

// Around a ring: sends message k (rank_input(seed + k, rank, shapes[k], dtypes[k]), tag k) to the next rank,
// receives the previous rank's in the reverse order of the tags (tags keep the messages apart) and EXPECTs each
// bitwise, then waits for its sends.
void expect_ring_with_tags(Communicator& c, uint64_t seed, const std::vector<Shape>& shapes,
                           const std::vector<DType>& dtypes);

}  // namespace testing
}  // namespace parallel
}  // namespace tandem
