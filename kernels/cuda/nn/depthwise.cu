// Depthwise convolutions (groups == in == out channels) in channels-last on Tandem's own kernels, forward and both
// backward passes: cuDNN's grouped convolutions run them far from the memory bandwidth they need (the H200 run's
// MobileNetV2 steps fitted them at under 1% of the arithmetic rate). Each output of the forward and of the data
// gradient gathers its taps in a fixed order; the weight gradient sums each (channel, tap) over slices of the
// positions, then the slices in order: no atomics, the same result every run. Sums in double, each result rounded
// once (bf16 through f32). Index arithmetic is 32-bit and divides once per column strip: a lane walks a column's
// rows and its taps by counting, and strides of 1 and 2 need no division (a 64-bit division by a value known only at
// run time costs dozens of instructions per element on a GPU, more than the element's memory traffic).
#include "kernels/cuda/nn/depthwise.h"

#include <algorithm>

#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/dispatch.h"
#include "runtime/base/config.h"
#include "runtime/base/cuda_check.h"

namespace tandem {
namespace cuda {

namespace {

constexpr int kMaxTaps = 9;        // kh * kw of the kernels taken (3 x 3 and smaller)
constexpr int kChannelLanes = 32;  // a block: channels across a warp...
constexpr int kPositionLanes = 8;  // ...and positions down its warps
// The weight gradient's partial sums: blocks of slices enough to fill a GPU (whatever its size, so that the sums'
// order depends on the shape alone), at most kMaxSlices per (channel, tap), and each slice's lanes walking at least
// kSliceRows rows (small images: several strips), so that a block's closing reduction and partial sums stay a small
// part of its work.
constexpr int64_t kSliceBlocks = 4096;
constexpr int64_t kMaxSlices = 2048;
constexpr int64_t kSliceRows = 16;
constexpr int64_t kMaxGridY = 65535;              // the most blocks down a grid's y
constexpr int64_t kMaxExtent = int64_t{1} << 28;  // sizes and offsets within an image that 32-bit arithmetic takes

// The geometry as kernels take it: 32-bit fields (depthwise_kernels_take checks that they fit), 16 of them, so no
// padding reaches the launch's parameters.
struct Geometry {
  int32_t n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw, taps, unused;
};
static_assert(sizeof(Geometry) == 16 * 4, "Geometry has padding");

// An element widened to double (bf16 through f32), and a double sum rounded to T (bf16 through f32, as the other
// bf16 kernels round their f32 results).
template <typename T>
__device__ __forceinline__ double wide(T v) {
  return static_cast<double>(static_cast<compute_t<T>>(v));
}
template <typename T>
__device__ __forceinline__ T narrow(double v) {
  return static_cast<T>(static_cast<compute_t<T>>(v));
}

Geometry geometry_of(const Conv2dGeometry& g) {
  auto i32 = [](int64_t v) { return static_cast<int32_t>(v); };
  return {i32(g.n),          i32(g.c),          i32(g.h),         i32(g.w),
          i32(g.oh),         i32(g.ow),         i32(g.kh),        i32(g.kw),
          i32(g.stride_h),   i32(g.stride_w),   i32(g.pad_h),     i32(g.pad_w),
          i32(g.dilation_h), i32(g.dilation_w), i32(g.kh * g.kw), 0};
}

// Whether stride s divides t >= 0, with q = t / s: strides 1 and 2 (nearly every depthwise layer) without a division.
__device__ __forceinline__ bool divides(int32_t t, int32_t s, int32_t& q) {
  if (t < 0) return false;
  if (s == 1) {
    q = t;
    return true;
  }
  if (s == 2) {
    q = t >> 1;
    return (t & 1) == 0;
  }
  q = t / s;
  return q * s == t;
}

// The taps of channel c in registers, widened.
template <typename T>
__device__ __forceinline__ void load_taps(const Geometry& g, const T* w, int32_t c, double (&wt)[kMaxTaps]) {
#pragma unroll
  for (int k = 0; k < kMaxTaps; ++k) wt[k] = k < g.taps ? wide(w[static_cast<int64_t>(c) * g.taps + k]) : 0.0;
}

// The kernels walk column strips: strip s of an image's `cols` columns (kPositionLanes wide, `tiles` per image) is
// image s / tiles and columns from (s % tiles) * kPositionLanes. Thread (x, y) of a block takes channel
// blockIdx.x * kChannelLanes + x (a warp: 32 channels of one position, contiguous in channels-last) and the strip's
// column y, whose rows it walks down in order: the rows of the other operand that one row reads (a 3 x 3 window's
// three) are read again by the next rows a few steps later, when they are still in cache. A block takes strips
// blockIdx.y, blockIdx.y + gridDim.y, ...
struct Strip {
  int32_t n, col;  // image, and this thread's column (>= cols: none)
};
__device__ __forceinline__ Strip strip_of(int64_t s, int32_t tiles) {
  const int64_t n = s / tiles;
  return {static_cast<int32_t>(n),
          static_cast<int32_t>(s - n * tiles) * kPositionLanes + static_cast<int32_t>(threadIdx.y)};
}

// y[n, oh, ow, c] = sum over the taps (i, j) of x[n, oh * sh - ph + i * dh, ow * sw - pw + j * dw, c] * w[c, i, j], in
// order of (i, j), plus bias[c] (may be null), rounded once; strips of output columns.
template <typename T>
__global__ void __launch_bounds__(kChannelLanes* kPositionLanes)
    forward_kernel(Geometry g, const T* x, const T* w, const T* bias, T* y, int32_t tiles) {
  const int32_t c = static_cast<int32_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  if (c >= g.c) return;
  double wt[kMaxTaps];
  load_taps(g, w, c, wt);
  const double b = bias != nullptr ? wide(bias[c]) : 0.0;
  for (int64_t s = blockIdx.y; s < static_cast<int64_t>(g.n) * tiles; s += gridDim.y) {
    const Strip st = strip_of(s, tiles);
    if (st.col >= g.ow) continue;
    const int64_t in = static_cast<int64_t>(st.n) * g.h, out = static_cast<int64_t>(st.n) * g.oh;
    const int32_t iw0 = st.col * g.sw - g.pw;
    for (int32_t oh = 0, ih0 = -g.ph; oh < g.oh; ++oh, ih0 += g.sh) {
      double acc = 0;
      int32_t i = 0, j = 0;
#pragma unroll
      for (int k = 0; k < kMaxTaps; ++k) {
        if (k >= g.taps) break;
        const int32_t ih = ih0 + i * g.dh, iw = iw0 + j * g.dw;
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) acc += wide(x[((in + ih) * g.w + iw) * g.c + c]) * wt[k];
        if (++j == g.kw) {
          j = 0;
          ++i;
        }
      }
      y[((out + oh) * g.ow + st.col) * g.c + c] = narrow<T>(acc + b);
    }
  }
}

// dx[n, ih, iw, c] = sum over the taps (i, j) whose output (oh, ow) reads it of dy[n, oh, ow, c] * w[c, i, j], in
// order of (i, j); with accumulate, dx + that sum rounded to T (one rounding of the add, as a separate add would do);
// strips of input columns.
template <typename T>
__global__ void __launch_bounds__(kChannelLanes* kPositionLanes)
    backward_data_kernel(Geometry g, const T* dy, const T* w, T* dx, int32_t tiles, int64_t accumulate) {
  const int32_t c = static_cast<int32_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  if (c >= g.c) return;
  double wt[kMaxTaps];
  load_taps(g, w, c, wt);
  for (int64_t s = blockIdx.y; s < static_cast<int64_t>(g.n) * tiles; s += gridDim.y) {
    const Strip st = strip_of(s, tiles);
    if (st.col >= g.w) continue;
    const int64_t in = static_cast<int64_t>(st.n) * g.h, out = static_cast<int64_t>(st.n) * g.oh;
    const int32_t tx0 = st.col + g.pw;
    for (int32_t ih = 0; ih < g.h; ++ih) {
      const int32_t ty0 = ih + g.ph;
      double acc = 0;
      int32_t i = 0, j = 0;
#pragma unroll
      for (int k = 0; k < kMaxTaps; ++k) {
        if (k >= g.taps) break;
        int32_t oy, ox;
        if (divides(ty0 - i * g.dh, g.sh, oy) && oy < g.oh && divides(tx0 - j * g.dw, g.sw, ox) && ox < g.ow)
          acc += wide(dy[((out + oy) * g.ow + ox) * g.c + c]) * wt[k];
        if (++j == g.kw) {
          j = 0;
          ++i;
        }
      }
      const T grad = narrow<T>(acc);
      using C = compute_t<T>;
      T& o = dx[((in + ih) * g.w + st.col) * g.c + c];
      o = accumulate ? static_cast<T>(static_cast<C>(o) + static_cast<C>(grad)) : grad;
    }
  }
}

// The weight gradient's partial sums: block row blockIdx.y (a slice) sums, over its strips of output columns, each
// (channel, tap) of dy[n, oh, ow, c] * x[n, oh * sh - ph + i * dh, ow * sw - pw + j * dw, c]; the block's lanes are
// then summed in order of y into partial[(slice * c + channel) * taps + k].
template <typename T>
__global__ void __launch_bounds__(kChannelLanes* kPositionLanes)
    backward_weight_partials_kernel(Geometry g, const T* x, const T* dy, int32_t tiles, double* partial) {
  __shared__ double lanes[kPositionLanes][kMaxTaps][kChannelLanes];
  const int32_t c = static_cast<int32_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  double acc[kMaxTaps];
#pragma unroll
  for (int k = 0; k < kMaxTaps; ++k) acc[k] = 0;
  for (int64_t s = blockIdx.y; c < g.c && s < static_cast<int64_t>(g.n) * tiles; s += gridDim.y) {
    const Strip st = strip_of(s, tiles);
    if (st.col >= g.ow) continue;
    const int64_t in = static_cast<int64_t>(st.n) * g.h, out = static_cast<int64_t>(st.n) * g.oh;
    const int32_t iw0 = st.col * g.sw - g.pw;
    for (int32_t oh = 0, ih0 = -g.ph; oh < g.oh; ++oh, ih0 += g.sh) {
      const double d = wide(dy[((out + oh) * g.ow + st.col) * g.c + c]);
      int32_t i = 0, j = 0;
#pragma unroll
      for (int k = 0; k < kMaxTaps; ++k) {
        if (k >= g.taps) break;
        const int32_t ih = ih0 + i * g.dh, iw = iw0 + j * g.dw;
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) acc[k] += d * wide(x[((in + ih) * g.w + iw) * g.c + c]);
        if (++j == g.kw) {
          j = 0;
          ++i;
        }
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxTaps; ++k) lanes[threadIdx.y][k][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= g.c) return;
  for (int k = 0; k < g.taps; ++k) {
    double sum = 0;
    for (int y = 0; y < kPositionLanes; ++y) sum += lanes[y][k][threadIdx.x];
    partial[(static_cast<int64_t>(blockIdx.y) * g.c + c) * g.taps + k] = sum;
  }
}

// dw[c, k] = the slices' partial sums in order of the slice, rounded once.
template <typename T>
__global__ void backward_weight_finalize_kernel(const double* partial, int64_t slices, int64_t entries, T* dw) {
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; e < entries; e += step) {
    double s = 0;
    for (int64_t i = 0; i < slices; ++i) s += partial[i * entries + e];
    dw[e] = narrow<T>(s);
  }
}

// The grid over the column strips of n images `cols` wide: channel blocks across x, strips (at most `most`, a block
// taking several beyond) down y.
struct StripGrid {
  dim3 grid;
  int32_t tiles;  // strips per image
};
StripGrid strip_grid(int64_t channels, int64_t n, int64_t cols, int64_t most) {
  const int64_t tiles = ceil_div(cols, kPositionLanes);
  return {
      dim3(static_cast<unsigned>(ceil_div(channels, kChannelLanes)), static_cast<unsigned>(std::min(n * tiles, most))),
      static_cast<int32_t>(tiles)};
}

}  // namespace

bool depthwise_kernels_take(const Conv2dGeometry& g) {
  const bool fits = std::max({g.n, g.c, g.h, g.w, g.oh, g.ow, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dilation_h,
                              g.dilation_w}) < kMaxExtent;
  return depthwise_kernels() && g.channels_last &&
         (g.dtype == DType::F32 || g.dtype == DType::F64 || g.dtype == DType::BF16) && g.groups == g.c && g.o == g.c &&
         g.kh * g.kw <= kMaxTaps && g.n * g.c * g.h * g.w > 0 && g.oh * g.ow > 0 && fits;
}

void depthwise_forward(const Conv2dForwardArgs& args, const Stream& s) {
  const Geometry g = geometry_of(args.g);
  LaunchScope ls(s);
  const StripGrid sg = strip_grid(args.g.c, args.g.n, args.g.ow, kMaxGridY);
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "depthwise conv2d forward", {
    launch_kernel(TD_KERNEL(forward_kernel<scalar_t>), sg.grid, dim3(kChannelLanes, kPositionLanes), 0, ls.stream(), g,
                  static_cast<const scalar_t*>(args.x), static_cast<const scalar_t*>(args.w),
                  static_cast<const scalar_t*>(args.bias), static_cast<scalar_t*>(args.y), sg.tiles);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "depthwise conv2d forward");
  });
}

void depthwise_backward_data(const Conv2dBackwardDataArgs& args, const Stream& s) {
  const Geometry g = geometry_of(args.g);
  LaunchScope ls(s);
  const StripGrid sg = strip_grid(args.g.c, args.g.n, args.g.w, kMaxGridY);
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "depthwise conv2d backward data", {
    launch_kernel(TD_KERNEL(backward_data_kernel<scalar_t>), sg.grid, dim3(kChannelLanes, kPositionLanes), 0,
                  ls.stream(), g, static_cast<const scalar_t*>(args.dy), static_cast<const scalar_t*>(args.w),
                  static_cast<scalar_t*>(args.dx), sg.tiles, static_cast<int64_t>(args.accumulate));
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "depthwise conv2d backward data");
  });
}

void depthwise_backward_weight(const Conv2dBackwardWeightArgs& args, const Stream& s) {
  const Geometry g = geometry_of(args.g);
  const int64_t taps = args.g.kh * args.g.kw, c = args.g.c;
  const int64_t strips = args.g.n * ceil_div(args.g.ow, kPositionLanes);
  const int64_t most = std::min({kMaxSlices, ceil_div(kSliceBlocks, ceil_div(c, kChannelLanes)),
                                 ceil_div(strips, ceil_div(kSliceRows, args.g.oh))});
  const StripGrid sg = strip_grid(c, args.g.n, args.g.ow, most);
  const int64_t slices = sg.grid.y;
  LaunchScope ls(s);
  const Storage partial = workspace(static_cast<size_t>(slices * c * taps) * sizeof(double), s);
  auto* part = static_cast<double*>(partial.data());
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "depthwise conv2d backward weight", {
    launch_kernel(TD_KERNEL(backward_weight_partials_kernel<scalar_t>), sg.grid, dim3(kChannelLanes, kPositionLanes), 0,
                  ls.stream(), g, static_cast<const scalar_t*>(args.x), static_cast<const scalar_t*>(args.dy), sg.tiles,
                  part);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "depthwise conv2d backward weight partials");
    launch_kernel(TD_KERNEL(backward_weight_finalize_kernel<scalar_t>),
                  grid_for(ceil_div(c * taps, kThreads), ls.device()), kThreads, 0, ls.stream(),
                  static_cast<const double*>(part), slices, c * taps, static_cast<scalar_t*>(args.dw));
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "depthwise conv2d backward weight finalize");
  });
}

}  // namespace cuda
}  // namespace tandem
