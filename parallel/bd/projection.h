// Simulator projections: the strategies' schedules timed by parallel::simulate from a profile extended to
// more workers than were measured, for speedups over DP at 4, 8, 16, 64 workers.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "parallel/bd/plan.h"
#include "parallel/bd/strategy.h"

namespace tandem {
namespace parallel {
namespace bd {

// The profile for replication factors 1..max_g. Measured factors are kept; beyond them, per block, compute
// times and memory follow t(b) = a + c b in the per-worker batch b = B/g (least squares over the measured
// factors, a and c clamped at 0), loads likewise, and all-reduce times follow a + c (g - 1) / g fitted over
// the measured g >= 2 (the ring all-reduce's bandwidth term; with one measured g, c alone); host times (when
// modelled) are the last measured factor's, since the launches do not change with the rows. Needs
// profile.batch.
BlockProfile extend_profile(const BlockProfile& profile, int max_g);

struct Projection {
  int workers = 0;  // workers available
  int used = 0;     // workers the strategy's layout occupies (pipelines: at most one per block)
  Strategy strategy = Strategy::DP;
  std::string layout;
  double makespan_s = 0;    // simulated time of `steps` steps of every block, or the host's launches if longer
  double speedup = 0;       // DP's makespan on the same workers over this one
  int64_t peak_memory = 0;  // the layout's largest per-worker memory estimate (0 for DP and LS)
};

// Simulates every strategy for each worker count over `steps` steps per block. row_bytes as in
// build_schedule. The plans of TR, DPU and AHD are made with `model`. A strategy that cannot run (DP with a
// batch not divisible by the workers, AHD without a plan under `memory_limit`) is left out.
std::vector<Projection> project(const BlockProfile& profile, const std::vector<int>& worker_counts, int64_t steps,
                                const std::vector<int64_t>& row_bytes, int64_t memory_limit = 0,
                                PlanModel model = kDefaultPlanModel);

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
