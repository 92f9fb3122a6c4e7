// f32 NCHW max pooling forward. For each output row, every (window row, window column) pair updates the whole
// output row in one loop over the output columns, a loop the compiler vectorizes; the pairs come in the window's
// row-major order, so the comparisons per output element are the ones pool.cc makes, in its order.
#include "kernels/cpu/nn/max_pool_f32.h"

#include <algorithm>
#include <limits>

#include "runtime/base/config.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {

// One (image, channel) plane: x [h, w] -> y, indices [oh, ow].
__attribute__((target_clones("avx512f", "avx2", "default"))) void pool_plane(const Pool2dGeometry& g, const float* x,
                                                                             float* y, int32_t* indices) {
  const int64_t sw = g.stride_w;
  for (int64_t oy = 0; oy < g.oh; ++oy) {
    float* best = y + oy * g.ow;
    int32_t* arg = indices + oy * g.ow;
    const int64_t top = oy * g.stride_h - g.pad_h;
    const int64_t h0 = std::max<int64_t>(top, 0), h1 = std::min(top + g.kernel_h, g.h);
    for (int64_t ox = 0; ox < g.ow; ++ox) {
      best[ox] = -std::numeric_limits<float>::infinity();
      arg[ox] = static_cast<int32_t>(h0 * g.w + std::max<int64_t>(ox * sw - g.pad_w, 0));
    }
    for (int64_t ih = h0; ih < h1; ++ih)
      for (int64_t kx = 0; kx < g.kernel_w; ++kx) {
        // Output columns whose window column kx lies inside the row: 0 <= ox * sw - pad_w + kx < w.
        const int64_t shift = kx - g.pad_w;
        const int64_t lo = shift >= 0 ? 0 : (-shift + sw - 1) / sw;
        const int64_t hi = g.w - 1 - shift < 0 ? 0 : std::min(g.ow, (g.w - 1 - shift) / sw + 1);
        const float* src = x + ih * g.w + shift;
        const int32_t base = static_cast<int32_t>(ih * g.w + shift);
        for (int64_t ox = lo; ox < hi; ++ox) {
          const float v = src[ox * sw], b = best[ox];
          const bool take = v > b || (v != v && b == b);  // a larger value, or the first NaN
          best[ox] = take ? v : b;
          arg[ox] = take ? base + static_cast<int32_t>(ox * sw) : arg[ox];
        }
      }
  }
}

}  // namespace

bool max_pool2d_f32_forward(const Pool2dGeometry& g, const float* x, float* y, int32_t* indices) {
  if (g.dtype != DType::F32 || g.channels_last || !cpu_onednn()) return false;
  const int64_t in_plane = g.h * g.w, out_plane = g.oh * g.ow;
  parallel_for(0, g.n * g.c, std::max<int64_t>(1, (int64_t(1) << 14) / std::max<int64_t>(in_plane, 1)),
               [&](int64_t lo, int64_t hi) {
                 for (int64_t p = lo; p < hi; ++p)
                   pool_plane(g, x + p * in_plane, y + p * out_plane, indices + p * out_plane);
               });
  return true;
}

}  // namespace cpu
}  // namespace tandem
