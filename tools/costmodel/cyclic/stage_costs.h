// Cyclic DP's stage costs (parallel/cyclic/timeline.h) from the cost model, for modelled GPUs joined by a
// modelled link: each stage's forward and backward (the last stage with its cross-entropy loss) and SGD update
// recorded on the simulated GPU at micro-batches of 2 and 4 samples (dry), extrapolated to the micro-batch and
// timed on the modelled GPU; the activation bytes each stage keeps from its forward until its backward read
// from the simulated allocator at those sizes, extrapolated; transfers at the link (NVLink).
#pragma once

#include <memory>
#include <vector>

#include "models/sequential.h"
#include "parallel/cyclic/timeline.h"
#include "tools/costmodel/model.h"

namespace tandem {
namespace costmodel {

struct ModelledStages {
  parallel::cyclic::StageCosts costs;
  std::vector<double> stored_bytes;  // per stage, for one micro-batch
};

// `sample` is one input's shape [C, H, W]; `batch` the micro-batch.
ModelledStages model_stage_costs(const std::vector<std::shared_ptr<models::Sequential>>& stages, const Shape& sample,
                                 int64_t batch, const GpuSpec& gpu, const Constants& c);

}  // namespace costmodel
}  // namespace tandem
