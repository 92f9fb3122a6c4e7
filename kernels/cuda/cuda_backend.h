// The CUDA backend: hand-written kernels for the Backend interface, GEMM through cuBLAS.
// Every method queues work on the given stream only; none synchronizes or allocates with cudaMalloc.
// Reductions and softmax are deterministic: fixed-order trees, no floating-point atomics, and a split
// (two-pass) plan chosen from the shape alone, so a given shape sums in the same order on every GPU.
// Sums accumulate in double for f32 and f64 inputs (cheap next to the memory traffic on A100/H100).
#pragma once

#include "runtime/tensor/backend.h"

namespace tandem {
namespace cuda {

class CudaBackend : public Backend {
 public:
  TANDEM_BACKEND_OVERRIDES
};

}  // namespace cuda
}  // namespace tandem
