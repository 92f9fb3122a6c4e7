// Float32 NCHW convolution as im2col + GEMM behind the CPU backend.
// Why: oneDNN's direct kernels vectorize over the pixels of a channel block; on the tiny planes of a network's
// deep layers (2x2, 1x1) they ran several times slower than its sgemm on the same products (measured
// single-threaded on ResNet-18's layer4 at 64x64, batch 64: weight gradient 29 ms against 10 ms), and PyTorch's
// CPU convolutions run those same kernels. A chunk of images is unfolded into columns, one GEMM runs the chunk,
// and the result is folded back: every element is a sum in an order fixed by the shapes.
#include "kernels/cpu/nn/conv_gemm.h"

#include <algorithm>
#include <cstring>

#include "kernels/cpu/nn/im2col.h"
#include "kernels/cpu/onednn.h"
#include "runtime/base/error.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {

struct Sizes {
  int64_t taps, rows, pixels, in_plane, per_chunk;  // kh*kw, c*taps, oh*ow, h*w, images per chunk
};

Sizes sizes_of(const Conv2dGeometry& g, int64_t chunk_floats) {
  Sizes s;
  s.taps = g.kh * g.kw;
  s.rows = g.c * s.taps;
  s.pixels = g.oh * g.ow;
  s.in_plane = g.h * g.w;
  s.per_chunk = std::max<int64_t>(1, std::min(g.n, chunk_floats / (s.rows * s.pixels)));
  return s;
}

// im2col, col2im and gather_chunk of im2col.h over the chunk's channels, split over threads.
void unfold(const Conv2dGeometry& g, const float* x, int64_t nb, int64_t cols, float* col) {
  parallel_for(0, g.c, 1, [&](int64_t lo, int64_t hi) { im2col(g, x, nb, cols, col, lo, hi); });
}

void fold(const Conv2dGeometry& g, const float* dcol, int64_t nb, int64_t cols, float* dx) {
  parallel_for(0, g.c, 1, [&](int64_t lo, int64_t hi) { col2im(g, dcol, nb, cols, dx, lo, hi); });
}

// mat [o, nb * pixels] <-> y [nb, o, pixels] (the chunk's images of an NCHW output or its gradient).
void gather_output(const Conv2dGeometry& g, const Sizes& s, const float* y, int64_t nb, float* mat) {
  parallel_for(0, g.o, 1, [&](int64_t lo, int64_t hi) { gather_chunk(y, nb, g.o, s.pixels, mat, lo, hi); });
}

void scatter_output(const Conv2dGeometry& g, const Sizes& s, const float* mat, const float* bias, int64_t nb,
                    float* y) {
  parallel_for(0, g.o, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t o = lo; o < hi; ++o) {
      const float b = bias ? bias[o] : 0.f;
      for (int64_t n = 0; n < nb; ++n) {
        const float* src = mat + (o * nb + n) * s.pixels;
        float* dst = y + (n * g.o + o) * s.pixels;
        if (bias)
          for (int64_t p = 0; p < s.pixels; ++p) dst[p] = src[p] + b;
        else
          std::memcpy(dst, src, s.pixels * sizeof(float));
      }
    }
  });
}

void gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, const float* a, int64_t lda, const float* b,
          int64_t ldb, float beta, float* c, int64_t ldc) {
  TD_CHECK_T(BackendError, onednn_gemm(trans_a, trans_b, m, n, k, 1.f, a, lda, b, ldb, beta, c, ldc),
             "the GEMM convolution needs oneDNN's GEMM, which is switched off or was given an empty product");
}

// The share of a spatial axis's (output position, tap) pairs that read the input, not its padding.
double taps_inside(int64_t out, int64_t in, int64_t taps, int64_t stride, int64_t pad, int64_t dilation) {
  int64_t inside = 0;
  for (int64_t t = 0; t < taps; ++t) {
    int64_t lo, hi;
    valid_range(out, stride, t * dilation - pad, in, lo, hi);
    inside += hi - lo;
  }
  return static_cast<double>(inside) / static_cast<double>(out * taps);
}

}  // namespace

// Measured single-threaded, each pass of each layer shape of ResNet-18/50 (3x3, 1x1, strided 1x1) and
// MobileNetV2's stem at 32x32 and 64x64 inputs, batches 8 and 64: oneDNN's weight gradient loses to the GEMM
// (up to 4x for a 3x3, 7x for a 1x1, 13x for a strided 1x1 with 1024 channels) wherever the output plane has
// 4 pixels or fewer, and for every strided 1x1 layer; its forward and data gradient lose (up to 3x) where the
// whole batch has 64 output pixels or fewer, unless most of the columns would be padding (a 3x3 on a 1x1
// plane: 8 of 9 taps are zeros), and win or tie elsewhere.
bool conv_gemm_applies(const Conv2dGeometry& g, ConvPass pass) {
  if (g.dtype != DType::F32 || g.channels_last || g.groups != 1 || g.n <= 0 || g.c <= 0 || g.o <= 0 || g.oh <= 0 ||
      g.ow <= 0)
    return false;
  const bool strided_one_by_one =
      g.kh == 1 && g.kw == 1 && g.pad_h == 0 && g.pad_w == 0 && (g.stride_h > 1 || g.stride_w > 1);
  const int64_t pixels = g.oh * g.ow;
  if (pass == ConvPass::backward_weight) return pixels <= 4 || strided_one_by_one;
  if (g.n * pixels > 64) return false;
  return taps_inside(g.oh, g.h, g.kh, g.stride_h, g.pad_h, g.dilation_h) *
             taps_inside(g.ow, g.w, g.kw, g.stride_w, g.pad_w, g.dilation_w) >=
         0.25;
}

namespace {

// A chunk of images [n0, n0 + nb) with its columns (nb * pixels) and the calling thread's buffers: col
// [rows, cols] for the unfolded input (or its gradient), mat [o, cols] for the output (or its gradient).
struct Chunk {
  int64_t n0, nb, cols;
  float *col, *mat;
};

template <typename Fn>
void for_each_chunk(const Conv2dGeometry& g, const Sizes& s, Fn fn) {
  for (int64_t n0 = 0; n0 < g.n; n0 += s.per_chunk) {
    const int64_t nb = std::min(s.per_chunk, g.n - n0), cols = nb * s.pixels;
    fn(Chunk{n0, nb, cols, thread_scratch(ScratchSlot::columns, s.rows * cols * sizeof(float)),
             thread_scratch(ScratchSlot::output_matrix, g.o * cols * sizeof(float))});
  }
}

}  // namespace

void conv_gemm_forward(const Conv2dGeometry& g, const float* x, const float* w, const float* bias, float* y,
                       int64_t chunk_floats) {
  const Sizes s = sizes_of(g, chunk_floats);
  for_each_chunk(g, s, [&](const Chunk& k) {
    unfold(g, x + k.n0 * g.c * s.in_plane, k.nb, k.cols, k.col);
    gemm(false, false, g.o, k.cols, s.rows, w, s.rows, k.col, k.cols, 0.f, k.mat, k.cols);
    scatter_output(g, s, k.mat, bias, k.nb, y + k.n0 * g.o * s.pixels);
  });
}

void conv_gemm_backward_data(const Conv2dGeometry& g, const float* dy, const float* w, float* dx,
                             int64_t chunk_floats) {
  const Sizes s = sizes_of(g, chunk_floats);
  for_each_chunk(g, s, [&](const Chunk& k) {
    gather_output(g, s, dy + k.n0 * g.o * s.pixels, k.nb, k.mat);
    gemm(true, false, s.rows, k.cols, g.o, w, s.rows, k.mat, k.cols, 0.f, k.col, k.cols);
    fold(g, k.col, k.nb, k.cols, dx + k.n0 * g.c * s.in_plane);
  });
}

// Chunks add to dw in image order.
void conv_gemm_backward_weight(const Conv2dGeometry& g, const float* x, const float* dy, float* dw,
                               int64_t chunk_floats) {
  const Sizes s = sizes_of(g, chunk_floats);
  for_each_chunk(g, s, [&](const Chunk& k) {
    unfold(g, x + k.n0 * g.c * s.in_plane, k.nb, k.cols, k.col);
    gather_output(g, s, dy + k.n0 * g.o * s.pixels, k.nb, k.mat);
    gemm(false, true, g.o, s.rows, k.cols, k.mat, k.cols, k.col, k.cols, k.n0 == 0 ? 0.f : 1.f, dw, s.rows);
  });
}

}  // namespace cpu
}  // namespace tandem
