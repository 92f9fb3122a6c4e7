// The CUDA NNBackend: convolution through cuDNN (kernels/cudnn; depthwise backward passes on its own kernels),
// hand-written batch norm, pooling, dropout and multi-tensor optimizer kernels. Every method queues work on the given
// stream only. Deterministic throughout except cuDNN convolution outside deterministic mode: reductions use fixed-order
// trees and two-pass splits chosen from the shape alone, pooling backward gathers (no atomics).
#pragma once

#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cuda {

class CudaNNBackend : public NNBackend {
 public:
  TANDEM_NN_BACKEND_OVERRIDES
};

}  // namespace cuda
}  // namespace tandem
