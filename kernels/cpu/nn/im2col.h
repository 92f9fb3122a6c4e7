// The column matrices of a convolution as a GEMM, shared by the plain CPU kernels (conv.cc) and the f32 GEMM path
// (conv_gemm.cc): im2col, its adjoint col2im, and the regrouping of a chunk of images' outputs. Each works on a
// range of channels, so that a caller may split the channels over threads (their writes are disjoint).
#pragma once

#include <algorithm>
#include <cstdint>

#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cpu {

// Outputs o in [lo, hi) whose input position o * stride + off lies in [0, in).
inline void valid_range(int64_t out, int64_t stride, int64_t off, int64_t in, int64_t& lo, int64_t& hi) {
  lo = off >= 0 ? 0 : (-off + stride - 1) / stride;
  hi = in - 1 - off < 0 ? 0 : (in - 1 - off) / stride + 1;
  lo = std::min(lo, out);
  hi = std::max(lo, std::min(hi, out));
}

// Where tap (ki, kj) reads: its input offsets, and the output rows [ylo, yhi) and columns [xlo, xhi) whose input
// lies inside the image (the others read padding).
struct TapWindow {
  int64_t yoff, xoff, ylo, yhi, xlo, xhi;
  TapWindow(const Conv2dGeometry& g, int64_t ki, int64_t kj)
      : yoff(ki * g.dilation_h - g.pad_h), xoff(kj * g.dilation_w - g.pad_w) {
    valid_range(g.oh, g.stride_h, yoff, g.h, ylo, yhi);
    valid_range(g.ow, g.stride_w, xoff, g.w, xlo, xhi);
  }
};

// cols[(c, ki, kj), img * ohw + (oy, ox)] = x[img, c, iy, ix] (0 in the padding) for the cnt images of x and the
// channels c in [c0, c1); cols has row stride ld.
template <typename T>
void im2col(const Conv2dGeometry& g, const T* x, int64_t cnt, int64_t ld, T* cols, int64_t c0, int64_t c1) {
  const int64_t ohw = g.oh * g.ow;
  for (int64_t c = c0; c < c1; ++c)
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const TapWindow t(g, ki, kj);
        // One row of cols, written in order: the images' pixels side by side.
        for (int64_t img = 0; img < cnt; ++img) {
          const T* plane = x + (img * g.c + c) * g.h * g.w;
          T* row = cols + ((c * g.kh + ki) * g.kw + kj) * ld + img * ohw;
          for (int64_t oy = 0; oy < g.oh; ++oy) {
            T* out = row + oy * g.ow;
            if (oy < t.ylo || oy >= t.yhi) {
              std::fill(out, out + g.ow, T(0));
              continue;
            }
            const T* in = plane + (oy * g.stride_h + t.yoff) * g.w;
            std::fill(out, out + t.xlo, T(0));
            if (g.stride_w == 1)
              for (int64_t ox = t.xlo; ox < t.xhi; ++ox) out[ox] = in[ox + t.xoff];
            else
              for (int64_t ox = t.xlo; ox < t.xhi; ++ox) out[ox] = in[ox * g.stride_w + t.xoff];
            std::fill(out + t.xhi, out + g.ow, T(0));
          }
        }
      }
}

// The adjoint of im2col for the channels in [c0, c1): dx[img, c, iy, ix] = the sum of the cols entries im2col
// would have read from it, in tap, then output-pixel order (a channel's planes are zeroed and summed while in
// cache).
template <typename T>
void col2im(const Conv2dGeometry& g, const T* cols, int64_t cnt, int64_t ld, T* dx, int64_t c0, int64_t c1) {
  const int64_t ohw = g.oh * g.ow, hw = g.h * g.w;
  for (int64_t c = c0; c < c1; ++c) {
    for (int64_t img = 0; img < cnt; ++img) std::fill(dx + (img * g.c + c) * hw, dx + (img * g.c + c + 1) * hw, T(0));
    for (int64_t ki = 0; ki < g.kh; ++ki)
      for (int64_t kj = 0; kj < g.kw; ++kj) {
        const TapWindow t(g, ki, kj);
        for (int64_t img = 0; img < cnt; ++img) {
          const T* row = cols + ((c * g.kh + ki) * g.kw + kj) * ld + img * ohw;
          T* plane = dx + (img * g.c + c) * hw;
          for (int64_t oy = t.ylo; oy < t.yhi; ++oy) {
            const T* in = row + oy * g.ow;
            T* out = plane + (oy * g.stride_h + t.yoff) * g.w;
            if (g.stride_w == 1)
              for (int64_t ox = t.xlo; ox < t.xhi; ++ox) out[ox + t.xoff] += in[ox];
            else
              for (int64_t ox = t.xlo; ox < t.xhi; ++ox) out[ox * g.stride_w + t.xoff] += in[ox];
          }
        }
      }
  }
}

// Gathers the cnt images of t [cnt, ch, ohw] into buf [ch, cnt * ohw], for the channels k in [k0, k1).
template <typename T>
void gather_chunk(const T* t, int64_t cnt, int64_t ch, int64_t ohw, T* buf, int64_t k0, int64_t k1) {
  for (int64_t k = k0; k < k1; ++k)
    for (int64_t img = 0; img < cnt; ++img)
      std::copy(t + (img * ch + k) * ohw, t + (img * ch + k + 1) * ohw, buf + (k * cnt + img) * ohw);
}

}  // namespace cpu
}  // namespace tandem
