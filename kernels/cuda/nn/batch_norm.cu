// CUDA batch normalization. Per-channel sums accumulate in double in two fixed-order passes (partials per
// (split, channel) from block trees, then one thread per channel sums its splits in order), so results are
// deterministic; an elementwise pass then applies per-channel coefficients.
#include <algorithm>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/nn/cuda_nn_backend.h"
#include "kernels/dispatch.h"
#include "runtime/base/cuda_check.h"

namespace tandem {
namespace cuda {

namespace {

// Element (o, c, i) of channel c lies at (o * channels + c) * inner + i. NCHW: outer = n, inner = hw;
// NHWC and 2-D inputs: outer = n * hw rows of `channels` values, inner = 1.
struct ChannelLayout {
  int64_t outer, channels, inner;
  __host__ __device__ int64_t per_channel() const { return outer * inner; }
  __host__ __device__ int64_t numel() const { return outer * channels * inner; }
};

ChannelLayout layout_of(const BatchNormGeometry& g) {
  if (g.channels_last || g.hw == 1) return {g.n * g.hw, g.c, 1};
  return {g.n, g.c, g.hw};
}

// Work units (elements of a plane, or rows) per partial sum, and the most partials per channel.
constexpr int64_t kUnitsPerSplit = 4096;
constexpr int64_t kMaxSplits = 256;
constexpr int kRowChannels = 32;  // channels per block of the row kernel (one warp across them)
constexpr int kRowLanes = 8;      // rows handled at once by such a block

struct Split {
  int64_t count, per;
};
// Fixed by the shape alone, so the summation order never depends on the GPU.
Split split_of(const ChannelLayout& L) {
  int64_t units = L.inner > 1 ? L.per_channel() : L.outer;
  int64_t count = std::min(kMaxSplits, std::max<int64_t>(1, ceil_div(units, kUnitsPerSplit)));
  int64_t per = std::max<int64_t>(1, ceil_div(units, count));
  return {std::max<int64_t>(1, ceil_div(units, per)), per};
}

template <typename T>
struct StatsOp {  // sum of x and of x^2
  const T* x;
  __device__ __forceinline__ void operator()(int64_t i, int64_t, double& a, double& b) const {
    double v = static_cast<double>(x[i]);
    a += v;
    b += v * v;
  }
};

template <typename T>
struct GradOp {  // sum of dy and of dy * (x - mean)
  const T* x;
  const T* dy;
  const T* mean;
  __device__ __forceinline__ void operator()(int64_t i, int64_t c, double& a, double& b) const {
    double d = static_cast<double>(dy[i]);
    a += d;
    b += d * (static_cast<double>(x[i]) - static_cast<double>(mean[c]));
  }
};

// Planes (inner > 1): block (split s, channel c) sums units [s * per, (s + 1) * per) of its channel.
template <typename Op>
__global__ void plane_partials(ChannelLayout L, int64_t per, Op op, double2* partial) {
  const int64_t c = blockIdx.y, j1 = min(L.per_channel(), static_cast<int64_t>(blockIdx.x + 1) * per);
  double a = 0, b = 0;
  int64_t j = static_cast<int64_t>(blockIdx.x) * per + threadIdx.x;
  if (j < j1) {
    int64_t o = j / L.inner, i = j - o * L.inner;
    for (; j < j1; j += blockDim.x) {
      op((o * L.channels + c) * L.inner + i, c, a, b);
      i += blockDim.x;
      while (i >= L.inner) {
        i -= L.inner;
        ++o;
      }
    }
  }
  __shared__ double sa[kMaxWarps], sb[kMaxWarps];
  auto add = [](double u, double v) { return u + v; };
  a = group_reduce(a, static_cast<int>(blockDim.x), add, sa);
  b = group_reduce(b, static_cast<int>(blockDim.x), add, sb);
  if (threadIdx.x == 0) partial[blockIdx.x * L.channels + c] = make_double2(a, b);
}

// Rows (inner == 1): block (split s, channel tile) has threadIdx.x across kRowChannels channels (coalesced)
// and threadIdx.y across rows.
template <typename Op>
__global__ void row_partials(ChannelLayout L, int64_t per, Op op, double2* partial) {
  const int64_t c = static_cast<int64_t>(blockIdx.y) * kRowChannels + threadIdx.x;
  const int64_t r1 = min(L.outer, static_cast<int64_t>(blockIdx.x + 1) * per);
  double a = 0, b = 0;
  if (c < L.channels)
    for (int64_t r = static_cast<int64_t>(blockIdx.x) * per + threadIdx.y; r < r1; r += kRowLanes)
      op(r * L.channels + c, c, a, b);
  __shared__ double sa[kRowLanes][kRowChannels + 1], sb[kRowLanes][kRowChannels + 1];
  sa[threadIdx.y][threadIdx.x] = a;
  sb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && c < L.channels) {
    double ta = 0, tb = 0;
    for (int k = 0; k < kRowLanes; ++k) {
      ta += sa[k][threadIdx.x];
      tb += sb[k][threadIdx.x];
    }
    partial[blockIdx.x * L.channels + c] = make_double2(ta, tb);
  }
}

template <typename Op>
void launch_partials(const ChannelLayout& L, const Split& sp, Op op, double2* partial, cudaStream_t stream) {
  if (L.inner > 1) {
    launch_kernel(TD_KERNEL(plane_partials<Op>),
                  dim3(static_cast<unsigned>(sp.count), static_cast<unsigned>(L.channels)), kThreads, 0, stream, L,
                  sp.per, op, partial);
    TD_CUDA_CHECK_LAUNCH(stream, "batch_norm plane_partials");
  } else {
    dim3 grid(static_cast<unsigned>(sp.count), static_cast<unsigned>(ceil_div(L.channels, kRowChannels)));
    launch_kernel(TD_KERNEL(row_partials<Op>), grid, dim3(kRowChannels, kRowLanes), 0, stream, L, sp.per, op, partial);
    TD_CUDA_CHECK_LAUNCH(stream, "batch_norm row_partials");
  }
}

// Per channel: batch mean and inverse std, running statistics, and y = (x - mean) * k + b's coefficients.
template <typename T>
__global__ void finalize_stats(const double2* partial, int64_t splits, int64_t channels, double count, double eps,
                               double momentum, T* running_mean, T* running_var, const T* weight, const T* bias,
                               T* save_mean, T* save_invstd, T* k, T* b) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  double s = 0, q = 0;
  for (int64_t p = 0; p < splits; ++p) {
    s += partial[p * channels + c].x;
    q += partial[p * channels + c].y;
  }
  const double mean = s / count, var = fmax(q / count - mean * mean, 0.0), invstd = 1.0 / sqrt(var + eps);
  save_mean[c] = static_cast<T>(mean);
  save_invstd[c] = static_cast<T>(invstd);
  if (running_mean != nullptr) {
    running_mean[c] = static_cast<T>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * mean);
    running_var[c] =
        static_cast<T>((1.0 - momentum) * static_cast<double>(running_var[c]) + momentum * var * count / (count - 1.0));
  }
  k[c] = static_cast<T>((weight ? static_cast<double>(weight[c]) : 1.0) * invstd);
  b[c] = bias ? bias[c] : T(0);
}

template <typename T>
__global__ void eval_coefficients(int64_t channels, const T* running_var, const T* weight, const T* bias, double eps,
                                  T* k, T* b) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  k[c] =
      static_cast<T>((weight ? static_cast<double>(weight[c]) : 1.0) / sqrt(static_cast<double>(running_var[c]) + eps));
  b[c] = bias ? bias[c] : T(0);
}

// Per channel: dweight, dbias, and dx = dy * k1 + (x - mean) * k2 + k3's coefficients.
template <typename T>
__global__ void finalize_grads(const double2* partial, int64_t splits, int64_t channels, double count, bool training,
                               const T* weight, const T* invstd, T* dweight, T* dbias, T* k1, T* k2, T* k3) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c >= channels) return;
  double s = 0, q = 0;
  for (int64_t p = 0; p < splits; ++p) {
    s += partial[p * channels + c].x;
    q += partial[p * channels + c].y;
  }
  const double is = static_cast<double>(invstd[c]), w = weight ? static_cast<double>(weight[c]) : 1.0;
  if (dbias != nullptr) dbias[c] = static_cast<T>(s);
  if (dweight != nullptr) dweight[c] = static_cast<T>(q * is);
  k1[c] = static_cast<T>(w * is);
  k2[c] = training ? static_cast<T>(-w * is * is * is * q / count) : T(0);
  k3[c] = training ? static_cast<T>(-w * is * s / count) : T(0);
}

// y = (x - m[c]) * k[c] + b[c].
template <typename T, typename I>
__global__ void apply_affine(ChannelLayout L, const T* x, const T* m, const T* k, const T* b, T* y) {
  const I n = static_cast<I>(L.numel()), inner = static_cast<I>(L.inner), channels = static_cast<I>(L.channels);
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const I c = (i / inner) % channels;
    y[i] = (x[i] - m[c]) * k[c] + b[c];
  }
}

// dx = dy * k1[c] + (x - m[c]) * k2[c] + k3[c].
template <typename T, typename I>
__global__ void apply_backward(ChannelLayout L, const T* dy, const T* x, const T* m, const T* k1, const T* k2,
                               const T* k3, T* dx) {
  const I n = static_cast<I>(L.numel()), inner = static_cast<I>(L.inner), channels = static_cast<I>(L.channels);
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    const I c = (i / inner) % channels;
    dx[i] = dy[i] * k1[c] + (x[i] - m[c]) * k2[c] + k3[c];
  }
}

bool small_index(const ChannelLayout& L) { return L.numel() < (int64_t{1} << 31); }

// Launches apply_affine over L, with 32-bit indices where they suffice.
template <typename T>
void launch_apply_affine(const ChannelLayout& L, const T* x, const T* m, const T* k, const T* b, T* y,
                         const LaunchScope& ls) {
  const unsigned grid = grid_for(ceil_div(L.numel(), kThreads), ls.device());
  if (small_index(L))
    launch_kernel(TD_KERNEL(apply_affine<T, uint32_t>), grid, kThreads, 0, ls.stream(), L, x, m, k, b, y);
  else
    launch_kernel(TD_KERNEL(apply_affine<T, int64_t>), grid, kThreads, 0, ls.stream(), L, x, m, k, b, y);
  TD_CUDA_CHECK_LAUNCH(ls.stream(), "batch_norm apply_affine");
}

unsigned channel_blocks(int64_t channels) { return static_cast<unsigned>(ceil_div(channels, kThreads)); }

// Workspace of `doubles2` double2 values followed by `ts` values of T (all stream-ordered with the call).
template <typename T>
struct Scratch {
  Storage storage;
  double2* partial;
  T* coef;
  Scratch(int64_t doubles2, int64_t ts, const Stream& s)
      : storage(workspace(static_cast<size_t>(doubles2) * sizeof(double2) + static_cast<size_t>(ts) * sizeof(T), s)),
        partial(static_cast<double2*>(storage.data())),
        coef(reinterpret_cast<T*>(partial + doubles2)) {}
};

void check_channels(const BatchNormGeometry& g) {
  TD_CHECK_SHAPE(g.c <= 65535, "batch_norm on CUDA supports at most 65535 channels, got ", g.c);
}

}  // namespace

void CudaNNBackend::batch_norm_forward_train(const BatchNormTrainArgs& args, const Stream& s) {
  if (args.g.c == 0) return;
  check_channels(args.g);
  LaunchScope ls(s);
  const ChannelLayout L = layout_of(args.g);
  const Split sp = split_of(L);
  TD_DISPATCH_FLOAT(args.g.dtype, "batch_norm", {
    using T = scalar_t;
    Scratch<T> scratch(sp.count * args.g.c, 2 * args.g.c, s);
    T *k = scratch.coef, *b = scratch.coef + args.g.c;
    launch_partials(L, sp, StatsOp<T>{static_cast<const T*>(args.x)}, scratch.partial, ls.stream());
    launch_kernel(TD_KERNEL(finalize_stats<T>), channel_blocks(args.g.c), kThreads, 0, ls.stream(), scratch.partial,
                  sp.count, args.g.c, static_cast<double>(L.per_channel()), args.eps, args.momentum,
                  static_cast<T*>(args.running_mean), static_cast<T*>(args.running_var),
                  static_cast<const T*>(args.weight), static_cast<const T*>(args.bias), static_cast<T*>(args.save_mean),
                  static_cast<T*>(args.save_invstd), k, b);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "batch_norm finalize_stats");
    launch_apply_affine<T>(L, static_cast<const T*>(args.x), static_cast<const T*>(args.save_mean), k, b,
                           static_cast<T*>(args.y), ls);
  });
}

void CudaNNBackend::batch_norm_forward_eval(const BatchNormEvalArgs& args, const Stream& s) {
  if (args.g.c == 0 || args.g.n * args.g.hw == 0) return;
  LaunchScope ls(s);
  const ChannelLayout L = layout_of(args.g);
  TD_DISPATCH_FLOAT(args.g.dtype, "batch_norm", {
    using T = scalar_t;
    Scratch<T> scratch(0, 2 * args.g.c, s);
    T *k = scratch.coef, *b = scratch.coef + args.g.c;
    launch_kernel(TD_KERNEL(eval_coefficients<T>), channel_blocks(args.g.c), kThreads, 0, ls.stream(), args.g.c,
                  static_cast<const T*>(args.running_var), static_cast<const T*>(args.weight),
                  static_cast<const T*>(args.bias), args.eps, k, b);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "batch_norm eval_coefficients");
    launch_apply_affine<T>(L, static_cast<const T*>(args.x), static_cast<const T*>(args.running_mean), k, b,
                           static_cast<T*>(args.y), ls);
  });
}

void CudaNNBackend::batch_norm_backward(const BatchNormBackwardArgs& args, const Stream& s) {
  if (args.g.c == 0) return;
  check_channels(args.g);
  LaunchScope ls(s);
  const ChannelLayout L = layout_of(args.g);
  const Split sp = split_of(L);
  TD_DISPATCH_FLOAT(args.g.dtype, "batch_norm backward", {
    using T = scalar_t;
    Scratch<T> scratch(sp.count * args.g.c, 3 * args.g.c, s);
    T *k1 = scratch.coef, *k2 = scratch.coef + args.g.c, *k3 = scratch.coef + 2 * args.g.c;
    const T* m = static_cast<const T*>(args.mean);
    launch_partials(L, sp, GradOp<T>{static_cast<const T*>(args.x), static_cast<const T*>(args.dy), m}, scratch.partial,
                    ls.stream());
    launch_kernel(TD_KERNEL(finalize_grads<T>), channel_blocks(args.g.c), kThreads, 0, ls.stream(), scratch.partial,
                  sp.count, args.g.c, static_cast<double>(L.per_channel()), args.training,
                  static_cast<const T*>(args.weight), static_cast<const T*>(args.invstd), static_cast<T*>(args.dweight),
                  static_cast<T*>(args.dbias), k1, k2, k3);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "batch_norm finalize_grads");
    if (args.dx != nullptr && L.numel() > 0) {
      const unsigned grid = grid_for(ceil_div(L.numel(), kThreads), ls.device());
      if (small_index(L))
        launch_kernel(TD_KERNEL(apply_backward<T, uint32_t>), grid, kThreads, 0, ls.stream(), L,
                      static_cast<const T*>(args.dy), static_cast<const T*>(args.x), m, k1, k2, k3,
                      static_cast<T*>(args.dx));
      else
        launch_kernel(TD_KERNEL(apply_backward<T, int64_t>), grid, kThreads, 0, ls.stream(), L,
                      static_cast<const T*>(args.dy), static_cast<const T*>(args.x), m, k1, k2, k3,
                      static_cast<T*>(args.dx));
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "batch_norm apply_backward");
    }
  });
}

}  // namespace cuda
}  // namespace tandem
