// Float32 NCHW convolution as im2col + GEMM (oneDNN's sgemm through onednn_gemm) behind the CPU backend, for the
// shapes where it beats oneDNN's direct convolution; conv.cc's plain kernels stay the reference.
#pragma once

#include <cstdint>

#include "kernels/cpu/nn/conv_path.h"
#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cpu {

// Whether the GEMM path suits this pass of g (select_cpu_conv_path asks): a fixed rule on the shapes (never on timings,
// so results do not change from run to run), measured on the zoo's layers at batches 8 and 64
// (kernels/cpu/nn/conv_gemm.cc). Only f32 NCHW without groups.
bool conv_gemm_applies(const Conv2dGeometry& g, ConvPass pass);

// Columns of im2col per chunk of images at most (floats): images go through in chunks of a size fixed by the
// shapes and this budget, so results never depend on the number of threads. Tests pass a small budget to
// cover several chunks.
constexpr int64_t kConvGemmChunkFloats = int64_t{1} << 22;

// y = conv(x, w) + bias (bias may be null); dx = conv's input gradient; dw = its weight gradient (overwritten).
void conv_gemm_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y,
                       int64_t chunk_floats = kConvGemmChunkFloats);
void conv_gemm_backward_data(const Conv2dGeometry& g, const float* dy, const float* w, float* dx,
                             int64_t chunk_floats = kConvGemmChunkFloats);
void conv_gemm_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                               int64_t chunk_floats = kConvGemmChunkFloats);

}  // namespace cpu
}  // namespace tandem
