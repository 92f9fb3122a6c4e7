// The AHD profiler: per block, the teacher forward and the student forward + backward + step at per-worker
// batch B/g (g = 1..G), the relay of each block boundary, each block's gradient all-reduce over g workers,
// peak memory per block and g, and the load of one batch — measured on the actual workers (CUDA events on
// GPUs, the host clock on CPUs): every shape of the blocks run once untimed first (warmup.h: each path of a
// supernet student), then `warmup` runs of each measured function, then the median of the trials.
#pragma once

#include "parallel/bd/plan.h"
#include "parallel/bd/runner.h"
#include "parallel/communicator.h"
#include "parallel/worker.h"

namespace tandem {
namespace parallel {
namespace bd {

struct ProfileOptions {
  int warmup = 2;
  int trials = 5;
  int max_replicas = 0;  // G (0: the number of workers)
};

// SPMD: every rank of `world` calls it. Rank r measures the factors g with (g - 1) % world.size() == r
// (GPU workers all at once, like Pipe-BD's profiler; CPU workers, which share the host's cores, one after
// another), ranks 0 and 1 time the relays, the first g ranks each all-reduce; the tables are then summed over
// the ranks so that every rank returns the same profile.
BlockProfile profile_blocks(const RunContext& ctx, const ProfileOptions& options, Worker& worker, Communicator& world);

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
