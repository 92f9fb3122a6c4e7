// Vectorizable f32 NCHW max pooling forward: the window swept row by row for a whole output row at once.
#pragma once

#include <cstdint>

#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cpu {

// y and indices as NNBackend::max_pool2d_forward (the first maximum in the window's row-major order wins, the
// first NaN wins over everything). Returns false, having done nothing, unless g is f32 NCHW and the fast f32
// kernels are on (cpu_onednn(): TANDEM_ONEDNN=0 runs pool.cc's plain kernel, the reference).
bool max_pool2d_f32_forward(const Pool2dGeometry& g, const float* x, float* y, int32_t* indices);

}  // namespace cpu
}  // namespace tandem
