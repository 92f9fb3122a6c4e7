// Per-stage measurements that drive the timelines and the memory predictions: forward and backward time,
// the activation bytes a stage keeps from its forward until its backward, and parameter and output sizes.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "models/sequential.h"
#include "parallel/cyclic/partition.h"
#include "parallel/cyclic/timeline.h"

namespace tandem {
namespace parallel {
namespace cyclic {

struct StageProfile {
  std::vector<double> forward_s, backward_s;  // fastest of the timed repetitions
  std::vector<int64_t> stored_bytes;          // Activations bytes held after the stage's forward (graph and output)
  std::vector<int64_t> forward_extra_bytes;   // peak Activations during its forward above what it holds after
  std::vector<int64_t> backward_extra_bytes;  // peak Activations during its backward above what it held before
  std::vector<int64_t> param_bytes;           // = gradient bytes
  std::vector<int64_t> output_bytes;          // the stage's output for one micro-batch
};

// Runs every stage's forward and backward once untimed (a warm-up: first calls cost more), then `reps` times timed,
// on this thread (the last stage with a cross-entropy loss on labels 0) on inputs of `micro_input` ([B, C, H, W]),
// measuring with a memory tracker of its own. The stages' parameters are not changed; their batch-norm running
// statistics are.
StageProfile profile_stages(const std::vector<std::shared_ptr<models::Sequential>>& stages, const Shape& micro_input,
                            int reps = 2);

// Timeline costs from a profile; transfers over a link of `link_bytes_per_s` (0: free) and `latency_s`.
StageCosts costs_from_profile(const StageProfile& p, double link_bytes_per_s = 0, double latency_s = 0);

// Costs from the units' FLOPs alone (forward and backward both proportional to FLOPs, equal as in the paper's
// figure, normalized so that a round lasts 2S time steps), with sizes for a micro-batch of `batch` samples: the
// ordering the trainer uses when it has no measured profile.
StageCosts flop_costs(const std::vector<Unit>& units, const std::vector<size_t>& starts, int64_t batch);

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
