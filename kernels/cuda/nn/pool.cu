// CUDA max and average pooling. Forward: one thread per output. Backward gathers: one thread per input
// element sums, in increasing window order, the gradients of the windows that cover it (no atomics), the
// same additions in the same order as the CPU's scatter, so both give identical results. bf16 is loaded into f32
// and each result rounded once (the CPU's f32 kernels on widened operands do the same). Where a launch's indices
// are below 2^31 (kNarrow), its divisions (an element's position, the windows covering an input) are IntDivider's
// multiplies, not 64-bit divisions of dozens of instructions each.
#include <math_constants.h>

#include <algorithm>

#include "kernels/cuda/int_divider.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/nn/cuda_nn_backend.h"
#include "kernels/dispatch.h"
#include "runtime/base/cuda_check.h"

namespace tandem {
namespace cuda {

namespace {

// The divisors of a launch's index arithmetic (kNarrow launches only): channels, the input's and output's sides,
// the strides.
struct Divisors {
  IntDivider c, h, w, oh, ow, sh, sw;
};
Divisors divisors_of(const Pool2dGeometry& g) {
  // (An empty input side, whose divider no launch uses, divides by 1.)
  auto d = [](int64_t v) { return IntDivider(static_cast<uint32_t>(std::max<int64_t>(v, 1))); };
  return {d(g.c), d(g.h), d(g.w), d(g.oh), d(g.ow), d(g.stride_h), d(g.stride_w)};
}
// Whether every index and divisor of g's launches is below 2^31.
bool narrow_indices(const Pool2dGeometry& g) {
  const int64_t limit = int64_t{1} << 31;
  return g.n * g.c * std::max(g.h * g.w, g.oh * g.ow) < limit &&
         std::max({g.h + g.pad_h, g.w + g.pad_w, g.stride_h, g.stride_w}) < limit;
}

// i / v for 0 <= i: d's multiply (d divides by v) where kNarrow, else a division.
template <bool kNarrow>
__device__ __forceinline__ int64_t quot(int64_t i, int64_t v, const IntDivider& d) {
  return kNarrow ? static_cast<int64_t>(d.div(static_cast<uint32_t>(i))) : i / v;
}

// Position (n, c, y, x) of linear element i of a dense [n, c, h, w] tensor (the input's sides, or the output's
// with `out`) in the geometry's memory order.
struct Pos {
  int64_t n, c, y, x;
};
template <bool kNarrow>
__device__ __forceinline__ Pos position(const Pool2dGeometry& g, const Divisors& dv, int64_t i, bool out) {
  const int64_t h = out ? g.oh : g.h, w = out ? g.ow : g.w;
  const IntDivider &hd = out ? dv.oh : dv.h, &wd = out ? dv.ow : dv.w;
  // The remainder of i by v, leaving the quotient in i.
  auto split = [&i](int64_t v, const IntDivider& d) {
    const int64_t q = quot<kNarrow>(i, v, d), r = i - q * v;
    i = q;
    return r;
  };
  Pos p;
  if (g.channels_last) {
    p.c = split(g.c, dv.c);
    p.x = split(w, wd);
    p.y = split(h, hd);
  } else {
    p.x = split(w, wd);
    p.y = split(h, hd);
    p.c = split(g.c, dv.c);
  }
  p.n = i;
  return p;
}
__device__ __forceinline__ int64_t offset(const Pool2dGeometry& g, int64_t n, int64_t c, int64_t y, int64_t x,
                                          int64_t h, int64_t w) {
  return g.channels_last ? ((n * h + y) * w + x) * g.c + c : ((n * g.c + c) * h + y) * w + x;
}

// Window of output (oy, ox) clipped to the input, and the average's divisor (as the CPU computes it).
struct Window {
  int64_t h0, h1, w0, w1;
  double divisor;
};
__device__ __forceinline__ Window window_of(const Pool2dGeometry& g, int64_t oy, int64_t ox) {
  int64_t h0 = oy * g.stride_h - g.pad_h, w0 = ox * g.stride_w - g.pad_w;
  int64_t h1 = min(h0 + g.kernel_h, g.h + g.pad_h), w1 = min(w0 + g.kernel_w, g.w + g.pad_w);
  const int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = max(h0, int64_t{0});
  w0 = max(w0, int64_t{0});
  h1 = min(h1, g.h);
  w1 = min(w1, g.w);
  return Window{h0, h1, w0, w1, static_cast<double>(g.count_include_pad ? padded : (h1 - h0) * (w1 - w0))};
}

// Outputs along one axis whose window [o * stride - pad, o * stride - pad + kernel) contains input i (d divides by
// the stride).
template <bool kNarrow>
__device__ __forceinline__ void covering(int64_t i, int64_t kernel, int64_t stride, int64_t pad, int64_t out,
                                         const IntDivider& d, int64_t& lo, int64_t& hi) {
  const int64_t first = i + pad - kernel + 1;  // o * stride >= first
  lo = first <= 0 ? 0 : quot<kNarrow>(first + stride - 1, stride, d);
  hi = min(out, quot<kNarrow>(i + pad, stride, d) + 1);
}

template <typename T, bool kNarrow>
__global__ void max_forward(Pool2dGeometry g, Divisors dv, const T* x, T* y, int32_t* indices) {
  const int64_t total = g.n * g.c * g.oh * g.ow, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const Pos p = position<kNarrow>(g, dv, i, true);
    const Window win = window_of(g, p.y, p.x);
    compute_t<T> best = -CUDART_INF_F;
    int64_t arg = win.h0 * g.w + win.w0;
    bool nan = false;
    for (int64_t ih = win.h0; ih < win.h1 && !nan; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const compute_t<T> v(x[offset(g, p.n, p.c, ih, iw, g.h, g.w)]);
        if (v > best || v != v) {
          best = v;
          arg = ih * g.w + iw;
          if (v != v) {
            nan = true;
            break;
          }
        }
      }
    y[i] = T(best);
    indices[i] = static_cast<int32_t>(arg);
  }
}

template <typename T, bool kNarrow>
__global__ void max_backward(Pool2dGeometry g, Divisors dv, const T* dy, const int32_t* indices, T* dx) {
  const int64_t total = g.n * g.c * g.h * g.w, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const Pos p = position<kNarrow>(g, dv, i, false);
    int64_t y0, y1, x0, x1;
    covering<kNarrow>(p.y, g.kernel_h, g.stride_h, g.pad_h, g.oh, dv.sh, y0, y1);
    covering<kNarrow>(p.x, g.kernel_w, g.stride_w, g.pad_w, g.ow, dv.sw, x0, x1);
    const int32_t self = static_cast<int32_t>(p.y * g.w + p.x);
    compute_t<T> acc = 0;
    for (int64_t oy = y0; oy < y1; ++oy)
      for (int64_t ox = x0; ox < x1; ++ox) {
        const int64_t o = offset(g, p.n, p.c, oy, ox, g.oh, g.ow);
        if (indices[o] == self) acc += compute_t<T>(dy[o]);
      }
    dx[i] = T(acc);
  }
}

template <typename T, bool kNarrow>
__global__ void avg_forward(Pool2dGeometry g, Divisors dv, const T* x, T* y) {
  const int64_t total = g.n * g.c * g.oh * g.ow, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const Pos p = position<kNarrow>(g, dv, i, true);
    const Window win = window_of(g, p.y, p.x);
    double s = 0;
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw)
        s += static_cast<double>(compute_t<T>(x[offset(g, p.n, p.c, ih, iw, g.h, g.w)]));
    y[i] = T(static_cast<compute_t<T>>(s / win.divisor));
  }
}

template <typename T, bool kNarrow>
__global__ void avg_backward(Pool2dGeometry g, Divisors dv, const T* dy, T* dx) {
  const int64_t total = g.n * g.c * g.h * g.w, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const Pos p = position<kNarrow>(g, dv, i, false);
    int64_t y0, y1, x0, x1;
    covering<kNarrow>(p.y, g.kernel_h, g.stride_h, g.pad_h, g.oh, dv.sh, y0, y1);
    covering<kNarrow>(p.x, g.kernel_w, g.stride_w, g.pad_w, g.ow, dv.sw, x0, x1);
    using C = compute_t<T>;
    C acc = 0;
    for (int64_t oy = y0; oy < y1; ++oy)
      for (int64_t ox = x0; ox < x1; ++ox) {
        const Window win = window_of(g, oy, ox);
        // A window clipped by ceil_mode may stop before this element.
        if (p.y >= win.h1 || p.x >= win.w1) continue;
        acc += static_cast<C>(static_cast<double>(C(dy[offset(g, p.n, p.c, oy, ox, g.oh, g.ow)])) / win.divisor);
      }
    dx[i] = T(acc);
  }
}

unsigned blocks_for(int64_t total, int device) { return grid_for(ceil_div(total, kThreads), device); }

// Launches kernel<T, kNarrow = true> over `total` elements of geometry g with g's divisors where its indices allow,
// else kernel<T, false>; the kernel's further arguments follow.
#define TD_POOL_LAUNCH(kernel, T, g, total, ls, what, ...)                                              \
  do {                                                                                                  \
    const bool narrow = narrow_indices(g);                                                              \
    const Divisors dv = narrow ? divisors_of(g) : Divisors{};                                           \
    const unsigned blocks = blocks_for(total, ls.device());                                             \
    if (narrow)                                                                                         \
      launch_kernel(TD_KERNEL(kernel<T, true>), blocks, kThreads, 0, ls.stream(), g, dv, __VA_ARGS__);  \
    else                                                                                                \
      launch_kernel(TD_KERNEL(kernel<T, false>), blocks, kThreads, 0, ls.stream(), g, dv, __VA_ARGS__); \
    TD_CUDA_CHECK_LAUNCH(ls.stream(), what);                                                            \
  } while (false)

}  // namespace

void CudaNNBackend::max_pool2d_forward(const MaxPool2dForwardArgs& args, const Stream& s) {
  const int64_t total = args.g.n * args.g.c * args.g.oh * args.g.ow;
  if (total == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "max_pool2d", {
    TD_POOL_LAUNCH(max_forward, scalar_t, args.g, total, ls, "max_pool2d forward", static_cast<const scalar_t*>(args.x),
                   static_cast<scalar_t*>(args.y), args.indices);
  });
}

void CudaNNBackend::max_pool2d_backward(const MaxPool2dBackwardArgs& args, const Stream& s) {
  const int64_t total = args.g.n * args.g.c * args.g.h * args.g.w;
  if (total == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "max_pool2d backward", {
    TD_POOL_LAUNCH(max_backward, scalar_t, args.g, total, ls, "max_pool2d backward",
                   static_cast<const scalar_t*>(args.dy), args.indices, static_cast<scalar_t*>(args.dx));
  });
}

void CudaNNBackend::avg_pool2d_forward(const AvgPool2dForwardArgs& args, const Stream& s) {
  const int64_t total = args.g.n * args.g.c * args.g.oh * args.g.ow;
  if (total == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "avg_pool2d", {
    TD_POOL_LAUNCH(avg_forward, scalar_t, args.g, total, ls, "avg_pool2d forward", static_cast<const scalar_t*>(args.x),
                   static_cast<scalar_t*>(args.y));
  });
}

void CudaNNBackend::avg_pool2d_backward(const AvgPool2dBackwardArgs& args, const Stream& s) {
  const int64_t total = args.g.n * args.g.c * args.g.h * args.g.w;
  if (total == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "avg_pool2d backward", {
    TD_POOL_LAUNCH(avg_backward, scalar_t, args.g, total, ls, "avg_pool2d backward",
                   static_cast<const scalar_t*>(args.dy), static_cast<scalar_t*>(args.dx));
  });
}

}  // namespace cuda
}  // namespace tandem
