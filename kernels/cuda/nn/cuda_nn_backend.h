// The CUDA NNBackend: convolution through cuDNN (kernels/cudnn; depthwise convolutions on its own kernels),
// hand-written batch norm, pooling, dropout and multi-tensor optimizer kernels. Every method queues work on the given
// stream only. Deterministic throughout except cuDNN convolution outside deterministic mode: reductions use fixed-order
// trees and two-pass splits chosen from the shape alone, pooling backward gathers (no atomics).
#pragma once

#include <cstdint>

#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cuda {

class CudaNNBackend : public NNBackend {
 public:
  TANDEM_NN_BACKEND_OVERRIDES
};

// Batch norm finalizes its partial sums inside the apply pass (a launch less each way, what small images are bound
// by) where an input has at most this many splits (default 16), else in a kernel of its own; both give the same bits.
// Returns the previous limit (tests set 0 to take the kernels).
int64_t set_batch_norm_fold_limit(int64_t splits);

}  // namespace cuda
}  // namespace tandem
