// CUDA max and average pooling. Forward: one thread per output. Backward gathers: one thread per input
// element sums, in increasing window order, the gradients of the windows that cover it (no atomics), the
// same additions in the same order as the CPU's scatter, so both give identical results.
#include <math_constants.h>

#include <algorithm>

#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/nn/cuda_nn_backend.h"
#include "kernels/dispatch.h"
#include "runtime/base/cuda_check.h"

namespace tandem {
namespace cuda {

namespace {

// Position (n, c, y, x) of linear element i of a dense [n, c, h, w] tensor in the geometry's memory order.
struct Pos {
  int64_t n, c, y, x;
};
__device__ __forceinline__ Pos position(const Pool2dGeometry& g, int64_t i, int64_t h, int64_t w) {
  Pos p;
  if (g.channels_last) {
    p.c = i % g.c;
    i /= g.c;
    p.x = i % w;
    i /= w;
    p.y = i % h;
    p.n = i / h;
  } else {
    p.x = i % w;
    i /= w;
    p.y = i % h;
    i /= h;
    p.c = i % g.c;
    p.n = i / g.c;
  }
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

// Outputs along one axis whose window [o * stride - pad, o * stride - pad + kernel) contains input i.
__device__ __forceinline__ void covering(int64_t i, int64_t kernel, int64_t stride, int64_t pad, int64_t out,
                                         int64_t& lo, int64_t& hi) {
  const int64_t first = i + pad - kernel + 1;  // o * stride >= first
  lo = first <= 0 ? 0 : (first + stride - 1) / stride;
  hi = min(out, (i + pad) / stride + 1);
}

template <typename T>
__global__ void max_forward(Pool2dGeometry g, const T* x, T* y, int32_t* indices) {
  const int64_t total = g.n * g.c * g.oh * g.ow, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const Pos p = position(g, i, g.oh, g.ow);
    const Window win = window_of(g, p.y, p.x);
    T best = -CUDART_INF_F;
    int64_t arg = win.h0 * g.w + win.w0;
    bool nan = false;
    for (int64_t ih = win.h0; ih < win.h1 && !nan; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) {
        const T v = x[offset(g, p.n, p.c, ih, iw, g.h, g.w)];
        if (v > best || v != v) {
          best = v;
          arg = ih * g.w + iw;
          if (v != v) {
            nan = true;
            break;
          }
        }
      }
    y[i] = best;
    indices[i] = static_cast<int32_t>(arg);
  }
}

template <typename T>
__global__ void max_backward(Pool2dGeometry g, const T* dy, const int32_t* indices, T* dx) {
  const int64_t total = g.n * g.c * g.h * g.w, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const Pos p = position(g, i, g.h, g.w);
    int64_t y0, y1, x0, x1;
    covering(p.y, g.kernel_h, g.stride_h, g.pad_h, g.oh, y0, y1);
    covering(p.x, g.kernel_w, g.stride_w, g.pad_w, g.ow, x0, x1);
    const int32_t self = static_cast<int32_t>(p.y * g.w + p.x);
    T acc = T(0);
    for (int64_t oy = y0; oy < y1; ++oy)
      for (int64_t ox = x0; ox < x1; ++ox) {
        const int64_t o = offset(g, p.n, p.c, oy, ox, g.oh, g.ow);
        if (indices[o] == self) acc += dy[o];
      }
    dx[i] = acc;
  }
}

template <typename T>
__global__ void avg_forward(Pool2dGeometry g, const T* x, T* y) {
  const int64_t total = g.n * g.c * g.oh * g.ow, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const Pos p = position(g, i, g.oh, g.ow);
    const Window win = window_of(g, p.y, p.x);
    double s = 0;
    for (int64_t ih = win.h0; ih < win.h1; ++ih)
      for (int64_t iw = win.w0; iw < win.w1; ++iw) s += static_cast<double>(x[offset(g, p.n, p.c, ih, iw, g.h, g.w)]);
    y[i] = static_cast<T>(s / win.divisor);
  }
}

template <typename T>
__global__ void avg_backward(Pool2dGeometry g, const T* dy, T* dx) {
  const int64_t total = g.n * g.c * g.h * g.w, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < total; i += step) {
    const Pos p = position(g, i, g.h, g.w);
    int64_t y0, y1, x0, x1;
    covering(p.y, g.kernel_h, g.stride_h, g.pad_h, g.oh, y0, y1);
    covering(p.x, g.kernel_w, g.stride_w, g.pad_w, g.ow, x0, x1);
    T acc = T(0);
    for (int64_t oy = y0; oy < y1; ++oy)
      for (int64_t ox = x0; ox < x1; ++ox) {
        const Window win = window_of(g, oy, ox);
        // A window clipped by ceil_mode may stop before this element.
        if (p.y >= win.h1 || p.x >= win.w1) continue;
        acc += static_cast<T>(static_cast<double>(dy[offset(g, p.n, p.c, oy, ox, g.oh, g.ow)]) / win.divisor);
      }
    dx[i] = acc;
  }
}

unsigned blocks_for(int64_t total, int device) { return grid_for(ceil_div(total, kThreads), device); }

}  // namespace

void CudaNNBackend::max_pool2d_forward(const MaxPool2dForwardArgs& args, const Stream& s) {
  const int64_t total = args.g.n * args.g.c * args.g.oh * args.g.ow;
  if (total == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(args.g.dtype, "max_pool2d", {
    launch_kernel(TD_KERNEL(max_forward<scalar_t>), blocks_for(total, ls.device()), kThreads, 0, ls.stream(), args.g,
                  static_cast<const scalar_t*>(args.x), static_cast<scalar_t*>(args.y), args.indices);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "max_pool2d forward");
  });
}

void CudaNNBackend::max_pool2d_backward(const MaxPool2dBackwardArgs& args, const Stream& s) {
  const int64_t total = args.g.n * args.g.c * args.g.h * args.g.w;
  if (total == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(args.g.dtype, "max_pool2d backward", {
    launch_kernel(TD_KERNEL(max_backward<scalar_t>), blocks_for(total, ls.device()), kThreads, 0, ls.stream(), args.g,
                  static_cast<const scalar_t*>(args.dy), args.indices, static_cast<scalar_t*>(args.dx));
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "max_pool2d backward");
  });
}

void CudaNNBackend::avg_pool2d_forward(const AvgPool2dForwardArgs& args, const Stream& s) {
  const int64_t total = args.g.n * args.g.c * args.g.oh * args.g.ow;
  if (total == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(args.g.dtype, "avg_pool2d", {
    launch_kernel(TD_KERNEL(avg_forward<scalar_t>), blocks_for(total, ls.device()), kThreads, 0, ls.stream(), args.g,
                  static_cast<const scalar_t*>(args.x), static_cast<scalar_t*>(args.y));
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "avg_pool2d forward");
  });
}

void CudaNNBackend::avg_pool2d_backward(const AvgPool2dBackwardArgs& args, const Stream& s) {
  const int64_t total = args.g.n * args.g.c * args.g.h * args.g.w;
  if (total == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(args.g.dtype, "avg_pool2d backward", {
    launch_kernel(TD_KERNEL(avg_backward<scalar_t>), blocks_for(total, ls.device()), kThreads, 0, ls.stream(), args.g,
                  static_cast<const scalar_t*>(args.dy), static_cast<scalar_t*>(args.dx));
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "avg_pool2d backward");
  });
}

}  // namespace cuda
}  // namespace tandem
