// The backward passes of depthwise convolutions (groups == in == out channels) in channels-last, on Tandem's own
// kernels: cuDNN's grouped convolutions run them far from the memory bandwidth they need (the H200 run's
// MobileNetV2 steps fitted them at under 1% of the arithmetic rate). Each output of the data gradient gathers its
// taps in a fixed order; the weight gradient sums each (channel, tap) over slices of the positions, then the
// slices in order: no atomics, the same result every run. Sums in double, each result rounded once (bf16 through
// f32).
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

constexpr int kMaxTaps = 9;           // kh * kw of the kernels taken (3 x 3 and smaller)
constexpr int kChannelLanes = 32;     // the weight gradient's block: channels across a warp...
constexpr int kPositionLanes = 8;     // ...and positions down its warps
constexpr int64_t kSliceRows = 64;    // (image, output row) pairs per slice of the weight gradient
constexpr int64_t kMaxSlices = 2048;  // at most this many slices (more rows per slice beyond)

// The geometry as kernels take it: every field 8 bytes, so no padding reaches the launch's parameters.
struct Geometry {
  int64_t n, c, h, w, oh, ow, kh, kw, sh, sw, ph, pw, dh, dw;
};
static_assert(sizeof(Geometry) == 14 * 8, "Geometry has padding");

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
  return {g.n,  g.c,        g.h,        g.w,     g.oh,    g.ow,         g.kh,
          g.kw, g.stride_h, g.stride_w, g.pad_h, g.pad_w, g.dilation_h, g.dilation_w};
}

// dx[n, ih, iw, c] = sum over the taps (i, j) whose output (oh, ow) reads it of dy[n, oh, ow, c] * w[c, i, j], in
// order of (i, j); with accumulate, dx + that sum rounded to T (one rounding of the add, as a separate add would do).
// Thread (x, y) of a block takes channel blockIdx.x * kChannelLanes + x, whose taps it holds in registers, and every
// kPositionLanes-th position from y of the block's run of `chunk` consecutive positions (a multiple of kPositionLanes):
// a warp reads and writes 32 channels of one position, contiguous in channels-last, and the block walks its rows in
// order, so that the rows of dy it reads for one row of dx it reads again for the next ones soon after.
template <typename T>
__global__ void __launch_bounds__(kChannelLanes* kPositionLanes)
    backward_data_kernel(Geometry g, const T* dy, const T* w, T* dx, int64_t chunk, int64_t accumulate) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  if (c >= g.c) return;
  const int64_t taps = g.kh * g.kw;
  double wt[kMaxTaps];
#pragma unroll
  for (int k = 0; k < kMaxTaps; ++k) wt[k] = k < taps ? wide(w[c * taps + k]) : 0.0;
  const int64_t end = min(g.n * g.h * g.w, (static_cast<int64_t>(blockIdx.y) + 1) * chunk);
  for (int64_t p = static_cast<int64_t>(blockIdx.y) * chunk + threadIdx.y; p < end; p += kPositionLanes) {
    const int64_t iw = p % g.w, ih = (p / g.w) % g.h, n = p / (g.w * g.h);
    double acc = 0;
#pragma unroll
    for (int k = 0; k < kMaxTaps; ++k) {
      if (k >= taps) break;
      const int64_t ty = ih + g.ph - (k / g.kw) * g.dh, tx = iw + g.pw - (k % g.kw) * g.dw;
      if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh || tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
      acc += wide(dy[((n * g.oh + ty / g.sh) * g.ow + tx / g.sw) * g.c + c]) * wt[k];
    }
    const T grad = narrow<T>(acc);
    using C = compute_t<T>;
    T& out = dx[p * g.c + c];
    out = accumulate ? static_cast<T>(static_cast<C>(out) + static_cast<C>(grad)) : grad;
  }
}

// Slice s of the weight gradient: rows [s * rows, (s + 1) * rows) of the n * oh (image, output row) pairs.
// Thread (x, y) of a block takes channel blockIdx.x * kChannelLanes + x and the positions of its rows y, y +
// kPositionLanes, ...; the block's lanes are then summed in order of y into partial[(s * c + channel) * taps + k].
template <typename T>
__global__ void __launch_bounds__(kChannelLanes* kPositionLanes)
    backward_weight_partials_kernel(Geometry g, const T* x, const T* dy, int64_t rows, double* partial) {
  __shared__ double lanes[kPositionLanes][kMaxTaps][kChannelLanes];
  const int64_t c = static_cast<int64_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  const int64_t taps = g.kh * g.kw, r0 = static_cast<int64_t>(blockIdx.y) * rows;
  const int64_t r1 = min(r0 + rows, g.n * g.oh);
  double acc[kMaxTaps];
#pragma unroll
  for (int k = 0; k < kMaxTaps; ++k) acc[k] = 0;
  if (c < g.c) {
    for (int64_t p = r0 * g.ow + threadIdx.y; p < r1 * g.ow; p += kPositionLanes) {
      const int64_t ow = p % g.ow, oh = (p / g.ow) % g.oh, n = p / (g.ow * g.oh);
      const double d = wide(dy[p * g.c + c]);
#pragma unroll
      for (int k = 0; k < kMaxTaps; ++k) {
        if (k >= taps) break;
        const int64_t ih = oh * g.sh - g.ph + (k / g.kw) * g.dh, iw = ow * g.sw - g.pw + (k % g.kw) * g.dw;
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) acc[k] += d * wide(x[((n * g.h + ih) * g.w + iw) * g.c + c]);
      }
    }
  }
#pragma unroll
  for (int k = 0; k < kMaxTaps; ++k) lanes[threadIdx.y][k][threadIdx.x] = acc[k];
  __syncthreads();
  if (threadIdx.y != 0 || c >= g.c) return;
  for (int64_t k = 0; k < taps; ++k) {
    double s = 0;
    for (int y = 0; y < kPositionLanes; ++y) s += lanes[y][k][threadIdx.x];
    partial[(blockIdx.y * g.c + c) * taps + k] = s;
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

}  // namespace

bool depthwise_kernels_take(const Conv2dGeometry& g) {
  return depthwise_kernels() && g.channels_last &&
         (g.dtype == DType::F32 || g.dtype == DType::F64 || g.dtype == DType::BF16) && g.groups == g.c && g.o == g.c &&
         g.kh * g.kw <= kMaxTaps && g.n * g.c * g.h * g.w > 0 && g.oh * g.ow > 0;
}

void depthwise_backward_data(const Conv2dBackwardDataArgs& args, const Stream& s) {
  const Geometry g = geometry_of(args.g);
  LaunchScope ls(s);
  // Channel blocks across x; down y, as many position blocks as keep the GPU's resident blocks busy.
  const int64_t channel_blocks = ceil_div(g.c, kChannelLanes);
  const int64_t position_blocks = ceil_div(g.n * g.h * g.w, kPositionLanes);
  const int64_t resident = grid_for(channel_blocks * position_blocks, ls.device());
  const int64_t runs = std::max<int64_t>(1, std::min(position_blocks, resident / channel_blocks));
  const int64_t chunk = ceil_div(position_blocks, runs) * kPositionLanes;  // positions per block
  const dim3 grid(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(runs));
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "depthwise conv2d backward data", {
    launch_kernel(TD_KERNEL(backward_data_kernel<scalar_t>), grid, dim3(kChannelLanes, kPositionLanes), 0, ls.stream(),
                  g, static_cast<const scalar_t*>(args.dy), static_cast<const scalar_t*>(args.w),
                  static_cast<scalar_t*>(args.dx), chunk, static_cast<int64_t>(args.accumulate));
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "depthwise conv2d backward data");
  });
}

void depthwise_backward_weight(const Conv2dBackwardWeightArgs& args, const Stream& s) {
  const Geometry g = geometry_of(args.g);
  const int64_t rows_total = g.n * g.oh, taps = g.kh * g.kw;
  const int64_t rows = std::max(kSliceRows, ceil_div(rows_total, kMaxSlices)), slices = ceil_div(rows_total, rows);
  LaunchScope ls(s);
  const Storage partial = workspace(static_cast<size_t>(slices * g.c * taps) * sizeof(double), s);
  auto* part = static_cast<double*>(partial.data());
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "depthwise conv2d backward weight", {
    launch_kernel(TD_KERNEL(backward_weight_partials_kernel<scalar_t>),
                  dim3(static_cast<unsigned>(ceil_div(g.c, kChannelLanes)), static_cast<unsigned>(slices)),
                  dim3(kChannelLanes, kPositionLanes), 0, ls.stream(), g, static_cast<const scalar_t*>(args.x),
                  static_cast<const scalar_t*>(args.dy), rows, part);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "depthwise conv2d backward weight partials");
    launch_kernel(TD_KERNEL(backward_weight_finalize_kernel<scalar_t>),
                  grid_for(ceil_div(g.c * taps, kThreads), ls.device()), kThreads, 0, ls.stream(),
                  static_cast<const double*>(part), slices, g.c * taps, static_cast<scalar_t*>(args.dw));
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "depthwise conv2d backward weight finalize");
  });
}

}  // namespace cuda
}  // namespace tandem
