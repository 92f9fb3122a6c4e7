// Depthwise convolutions (groups == in == out channels) in channels-last on Tandem's own kernels, forward and both
// backward passes: cuDNN's grouped convolutions run them far from the memory bandwidth they need (the H200 run's
// MobileNetV2 steps fitted them at under 1% of the arithmetic rate). Each output of the forward and of the data
// gradient gathers its taps in a fixed order; the weight gradient sums each (channel, tap) over slices of the
// positions, then the slices in order: no atomics, the same result every run. Sums in double, each result rounded
// once (bf16 through f32). Index arithmetic is 32-bit and divides only once per thread: a lane steps through its
// positions and taps by counting, and strides of 1 and 2 need no division (a 64-bit division by a value known only
// at run time costs dozens of instructions per element on a GPU, more than the element's memory traffic).
#include "kernels/cuda/nn/depthwise.h"

#include <algorithm>
#include <limits>

#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/dispatch.h"
#include "runtime/base/config.h"
#include "runtime/base/cuda_check.h"

namespace tandem {
namespace cuda {

namespace {

constexpr int kMaxTaps = 9;           // kh * kw of the kernels taken (3 x 3 and smaller)
constexpr int kChannelLanes = 32;     // a block: channels across a warp...
constexpr int kPositionLanes = 8;     // ...and positions down its warps
constexpr int64_t kSliceRows = 64;    // (image, output row) pairs per slice of the weight gradient
constexpr int64_t kMaxSlices = 2048;  // at most this many slices (more rows per slice beyond)
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
  return {i32(g.n),        i32(g.c),        i32(g.h),     i32(g.w),     i32(g.oh),         i32(g.ow),
          i32(g.kh),       i32(g.kw),       i32(g.stride_h), i32(g.stride_w), i32(g.pad_h), i32(g.pad_w),
          i32(g.dilation_h), i32(g.dilation_w), i32(g.kh * g.kw), 0};
}

// Position p of an n x rows x cols grid as (image, row, column), divided out once; advance() steps it on by
// kPositionLanes positions by counting.
struct Position {
  int32_t n, row, col;
  __device__ Position(int64_t p, int32_t rows, int32_t cols) {
    const int64_t q = p / cols;
    col = static_cast<int32_t>(p - q * cols);
    n = static_cast<int32_t>(q / rows);
    row = static_cast<int32_t>(q - static_cast<int64_t>(n) * rows);
  }
  __device__ __forceinline__ void advance(int32_t rows, int32_t cols) {
    col += kPositionLanes;
    while (col >= cols) {
      col -= cols;
      if (++row == rows) {
        row = 0;
        ++n;
      }
    }
  }
};

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

// The run of positions [begin, end) of block row blockIdx.y (`chunk` positions each) of `total`, from lane
// threadIdx.y.
struct Run {
  int64_t begin, end;
};
__device__ __forceinline__ Run run_of(int64_t total, int64_t chunk) {
  return {static_cast<int64_t>(blockIdx.y) * chunk + threadIdx.y,
          min(total, (static_cast<int64_t>(blockIdx.y) + 1) * chunk)};
}

// y[n, oh, ow, c] = sum over the taps (i, j) of x[n, oh * sh - ph + i * dh, ow * sw - pw + j * dw, c] * w[c, i, j], in
// order of (i, j), plus bias[c] (may be null), rounded once. Thread (x, y) of a block takes channel
// blockIdx.x * kChannelLanes + x, whose taps it holds in registers, and every kPositionLanes-th output position from
// y of the block's run of `chunk` consecutive positions: a warp reads and writes 32 channels of one position,
// contiguous in channels-last, and the block walks its rows in order, so that the input rows it reads for one output
// row it reads again for the next ones soon after.
template <typename T>
__global__ void __launch_bounds__(kChannelLanes* kPositionLanes)
    forward_kernel(Geometry g, const T* x, const T* w, const T* bias, T* y, int64_t chunk) {
  const int32_t c = static_cast<int32_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  const Run run = run_of(static_cast<int64_t>(g.n) * g.oh * g.ow, chunk);
  if (c >= g.c || run.begin >= run.end) return;
  double wt[kMaxTaps];
  load_taps(g, w, c, wt);
  const double b = bias != nullptr ? wide(bias[c]) : 0.0;
  Position at(run.begin, g.oh, g.ow);
  for (int64_t p = run.begin; p < run.end; p += kPositionLanes, at.advance(g.oh, g.ow)) {
    const int64_t image = static_cast<int64_t>(at.n) * g.h;
    const int32_t ih0 = at.row * g.sh - g.ph, iw0 = at.col * g.sw - g.pw;
    double acc = 0;
    int32_t i = 0, j = 0;
#pragma unroll
    for (int k = 0; k < kMaxTaps; ++k) {
      if (k >= g.taps) break;
      const int32_t ih = ih0 + i * g.dh, iw = iw0 + j * g.dw;
      if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w)
        acc += wide(x[((image + ih) * g.w + iw) * g.c + c]) * wt[k];
      if (++j == g.kw) {
        j = 0;
        ++i;
      }
    }
    y[p * g.c + c] = narrow<T>(acc + b);
  }
}

// dx[n, ih, iw, c] = sum over the taps (i, j) whose output (oh, ow) reads it of dy[n, oh, ow, c] * w[c, i, j], in
// order of (i, j); with accumulate, dx + that sum rounded to T (one rounding of the add, as a separate add would do).
// The threads as forward_kernel's, over input positions.
template <typename T>
__global__ void __launch_bounds__(kChannelLanes* kPositionLanes)
    backward_data_kernel(Geometry g, const T* dy, const T* w, T* dx, int64_t chunk, int64_t accumulate) {
  const int32_t c = static_cast<int32_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  const Run run = run_of(static_cast<int64_t>(g.n) * g.h * g.w, chunk);
  if (c >= g.c || run.begin >= run.end) return;
  double wt[kMaxTaps];
  load_taps(g, w, c, wt);
  Position at(run.begin, g.h, g.w);
  for (int64_t p = run.begin; p < run.end; p += kPositionLanes, at.advance(g.h, g.w)) {
    const int64_t image = static_cast<int64_t>(at.n) * g.oh;
    const int32_t ty0 = at.row + g.ph, tx0 = at.col + g.pw;
    double acc = 0;
    int32_t i = 0, j = 0;
#pragma unroll
    for (int k = 0; k < kMaxTaps; ++k) {
      if (k >= g.taps) break;
      int32_t oy, ox;
      if (divides(ty0 - i * g.dh, g.sh, oy) && oy < g.oh && divides(tx0 - j * g.dw, g.sw, ox) && ox < g.ow)
        acc += wide(dy[((image + oy) * g.ow + ox) * g.c + c]) * wt[k];
      if (++j == g.kw) {
        j = 0;
        ++i;
      }
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
  const int32_t c = static_cast<int32_t>(blockIdx.x) * kChannelLanes + threadIdx.x;
  const int64_t r0 = static_cast<int64_t>(blockIdx.y) * rows;
  const int64_t begin = r0 * g.ow + threadIdx.y, end = min(r0 + rows, static_cast<int64_t>(g.n) * g.oh) * g.ow;
  double acc[kMaxTaps];
#pragma unroll
  for (int k = 0; k < kMaxTaps; ++k) acc[k] = 0;
  if (c < g.c && begin < end) {
    Position at(begin, g.oh, g.ow);
    for (int64_t p = begin; p < end; p += kPositionLanes, at.advance(g.oh, g.ow)) {
      const double d = wide(dy[p * g.c + c]);
      const int64_t image = static_cast<int64_t>(at.n) * g.h;
      const int32_t ih0 = at.row * g.sh - g.ph, iw0 = at.col * g.sw - g.pw;
      int32_t i = 0, j = 0;
#pragma unroll
      for (int k = 0; k < kMaxTaps; ++k) {
        if (k >= g.taps) break;
        const int32_t ih = ih0 + i * g.dh, iw = iw0 + j * g.dw;
        if (ih >= 0 && ih < g.h && iw >= 0 && iw < g.w) acc[k] += d * wide(x[((image + ih) * g.w + iw) * g.c + c]);
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
    double s = 0;
    for (int y = 0; y < kPositionLanes; ++y) s += lanes[y][k][threadIdx.x];
    partial[(static_cast<int64_t>(blockIdx.y) * g.c + c) * g.taps + k] = s;
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

// The grid of forward_kernel and backward_data_kernel over `positions`: channel blocks across x; down y, as many
// runs of positions as keep the GPU's resident blocks busy; and the run's length (a multiple of kPositionLanes).
struct GatherGrid {
  dim3 grid;
  int64_t chunk;
};
GatherGrid gather_grid(int64_t channels, int64_t positions, int device) {
  const int64_t channel_blocks = ceil_div(channels, kChannelLanes);
  const int64_t position_blocks = ceil_div(positions, kPositionLanes);
  const int64_t resident = grid_for(channel_blocks * position_blocks, device);
  const int64_t runs = std::max<int64_t>(1, std::min(position_blocks, resident / channel_blocks));
  const int64_t chunk = ceil_div(position_blocks, runs) * kPositionLanes;
  return {dim3(static_cast<unsigned>(channel_blocks), static_cast<unsigned>(ceil_div(positions, chunk))), chunk};
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
  const GatherGrid gg = gather_grid(args.g.c, args.g.n * args.g.oh * args.g.ow, ls.device());
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "depthwise conv2d forward", {
    launch_kernel(TD_KERNEL(forward_kernel<scalar_t>), gg.grid, dim3(kChannelLanes, kPositionLanes), 0, ls.stream(),
                  g, static_cast<const scalar_t*>(args.x), static_cast<const scalar_t*>(args.w),
                  static_cast<const scalar_t*>(args.bias), static_cast<scalar_t*>(args.y), gg.chunk);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "depthwise conv2d forward");
  });
}

void depthwise_backward_data(const Conv2dBackwardDataArgs& args, const Stream& s) {
  const Geometry g = geometry_of(args.g);
  LaunchScope ls(s);
  const GatherGrid gg = gather_grid(args.g.c, args.g.n * args.g.h * args.g.w, ls.device());
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "depthwise conv2d backward data", {
    launch_kernel(TD_KERNEL(backward_data_kernel<scalar_t>), gg.grid, dim3(kChannelLanes, kPositionLanes), 0,
                  ls.stream(), g, static_cast<const scalar_t*>(args.dy), static_cast<const scalar_t*>(args.w),
                  static_cast<scalar_t*>(args.dx), gg.chunk, static_cast<int64_t>(args.accumulate));
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "depthwise conv2d backward data");
  });
}

void depthwise_backward_weight(const Conv2dBackwardWeightArgs& args, const Stream& s) {
  const Geometry g = geometry_of(args.g);
  const int64_t rows_total = args.g.n * args.g.oh, taps = args.g.kh * args.g.kw, c = args.g.c;
  const int64_t rows = std::max(kSliceRows, ceil_div(rows_total, kMaxSlices)), slices = ceil_div(rows_total, rows);
  LaunchScope ls(s);
  const Storage partial = workspace(static_cast<size_t>(slices * c * taps) * sizeof(double), s);
  auto* part = static_cast<double*>(partial.data());
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "depthwise conv2d backward weight", {
    launch_kernel(TD_KERNEL(backward_weight_partials_kernel<scalar_t>),
                  dim3(static_cast<unsigned>(ceil_div(c, kChannelLanes)), static_cast<unsigned>(slices)),
                  dim3(kChannelLanes, kPositionLanes), 0, ls.stream(), g, static_cast<const scalar_t*>(args.x),
                  static_cast<const scalar_t*>(args.dy), rows, part);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "depthwise conv2d backward weight partials");
    launch_kernel(TD_KERNEL(backward_weight_finalize_kernel<scalar_t>),
                  grid_for(ceil_div(c * taps, kThreads), ls.device()), kThreads, 0, ls.stream(),
                  static_cast<const double*>(part), slices, c * taps, static_cast<scalar_t*>(args.dw));
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "depthwise conv2d backward weight finalize");
  });
}

}  // namespace cuda
}  // namespace tandem
