// CPU max and average pooling, forward and backward, one (image, channel) plane per task (f32 NCHW max pooling
// forward: max_pool_f32.cc unless the fast kernels are off).
#include <algorithm>
#include <cmath>
#include <limits>

#include "kernels/cpu/nn/cpu_nn_backend.h"
#include "kernels/cpu/nn/max_pool_f32.h"
#include "kernels/dispatch.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {

// Element addressing of plane (image, channel) in either memory format.
struct Plane {
  int64_t base, step_h, step_w;
  int64_t at(int64_t h, int64_t w) const { return base + h * step_h + w * step_w; }
};

Plane plane_of(const Pool2dGeometry& g, int64_t p, int64_t h, int64_t w) {
  int64_t img = p / g.c, c = p % g.c;
  if (g.channels_last) return Plane{img * h * w * g.c + c, w * g.c, g.c};
  return Plane{p * h * w, w, 1};
}

// The window of output (oy, ox): rows [h0, h1) and columns [w0, w1) clipped to the input, and the
// average's divisor.
struct Window {
  int64_t h0, h1, w0, w1;
  double divisor;
};

Window window_of(const Pool2dGeometry& g, int64_t oy, int64_t ox) {
  int64_t h0 = oy * g.stride_h - g.pad_h, w0 = ox * g.stride_w - g.pad_w;
  int64_t h1 = std::min(h0 + g.kernel_h, g.h + g.pad_h), w1 = std::min(w0 + g.kernel_w, g.w + g.pad_w);
  int64_t padded = (h1 - h0) * (w1 - w0);
  h0 = std::max<int64_t>(h0, 0);
  w0 = std::max<int64_t>(w0, 0);
  h1 = std::min(h1, g.h);
  w1 = std::min(w1, g.w);
  int64_t inside = (h1 - h0) * (w1 - w0);
  return Window{h0, h1, w0, w1, static_cast<double>(g.count_include_pad ? padded : inside)};
}

// Runs fn(in, out) for every (image, channel) plane, the planes in parallel: in and out address the plane's
// input and output elements.
template <typename Fn>
void for_each_plane(const Pool2dGeometry& g, Fn fn) {
  parallel_for(0, g.n * g.c, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) fn(plane_of(g, p, g.h, g.w), plane_of(g, p, g.oh, g.ow));
  });
}

// Zeroes the input plane's gradient, which the backward passes then accumulate into.
template <typename T>
void zero_plane(const Pool2dGeometry& g, const Plane& in, T* dx) {
  for (int64_t ih = 0; ih < g.h; ++ih)
    for (int64_t iw = 0; iw < g.w; ++iw) dx[in.at(ih, iw)] = T(0);
}

template <typename T>
void max_forward(const Pool2dGeometry& g, const T* x, T* y, int32_t* indices) {
  for_each_plane(g, [&](const Plane& in, const Plane& out) {
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        Window win = window_of(g, oy, ox);
        T best = -std::numeric_limits<T>::infinity();
        int64_t arg = win.h0 * g.w + win.w0;
        // The first maximum wins; a NaN wins over everything (it propagates).
        for (int64_t ih = win.h0; ih < win.h1 && !std::isnan(best); ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw) {
            T v = x[in.at(ih, iw)];
            if (v > best || std::isnan(v)) {
              best = v;
              arg = ih * g.w + iw;
              if (std::isnan(v)) break;
            }
          }
        y[out.at(oy, ox)] = best;
        indices[out.at(oy, ox)] = static_cast<int32_t>(arg);
      }
  });
}

template <typename T>
void max_backward(const Pool2dGeometry& g, const T* dy, const int32_t* indices, T* dx) {
  for_each_plane(g, [&](const Plane& in, const Plane& out) {
    zero_plane(g, in, dx);
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        int64_t arg = indices[out.at(oy, ox)];
        dx[in.at(arg / g.w, arg % g.w)] += dy[out.at(oy, ox)];
      }
  });
}

template <typename T>
void avg_forward(const Pool2dGeometry& g, const T* x, T* y) {
  for_each_plane(g, [&](const Plane& in, const Plane& out) {
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        Window win = window_of(g, oy, ox);
        double s = 0;
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw) s += static_cast<double>(x[in.at(ih, iw)]);
        y[out.at(oy, ox)] = static_cast<T>(s / win.divisor);
      }
  });
}

template <typename T>
void avg_backward(const Pool2dGeometry& g, const T* dy, T* dx) {
  for_each_plane(g, [&](const Plane& in, const Plane& out) {
    zero_plane(g, in, dx);
    for (int64_t oy = 0; oy < g.oh; ++oy)
      for (int64_t ox = 0; ox < g.ow; ++ox) {
        Window win = window_of(g, oy, ox);
        T share = static_cast<T>(static_cast<double>(dy[out.at(oy, ox)]) / win.divisor);
        for (int64_t ih = win.h0; ih < win.h1; ++ih)
          for (int64_t iw = win.w0; iw < win.w1; ++iw) dx[in.at(ih, iw)] += share;
      }
  });
}

}  // namespace

void CpuNNBackend::max_pool2d_forward(const MaxPool2dForwardArgs& args, const Stream&) {
  if (max_pool2d_f32_forward(args.g, static_cast<const float*>(args.x), static_cast<float*>(args.y), args.indices))
    return;
  TD_DISPATCH_FLOAT(args.g.dtype, "max_pool2d", {
    max_forward(args.g, static_cast<const scalar_t*>(args.x), static_cast<scalar_t*>(args.y), args.indices);
  });
}

void CpuNNBackend::max_pool2d_backward(const MaxPool2dBackwardArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT(args.g.dtype, "max_pool2d backward", {
    max_backward(args.g, static_cast<const scalar_t*>(args.dy), args.indices, static_cast<scalar_t*>(args.dx));
  });
}

void CpuNNBackend::avg_pool2d_forward(const AvgPool2dForwardArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT(args.g.dtype, "avg_pool2d",
                    { avg_forward(args.g, static_cast<const scalar_t*>(args.x), static_cast<scalar_t*>(args.y)); });
}

void CpuNNBackend::avg_pool2d_backward(const AvgPool2dBackwardArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT(args.g.dtype, "avg_pool2d backward",
                    { avg_backward(args.g, static_cast<const scalar_t*>(args.dy), static_cast<scalar_t*>(args.dx)); });
}

}  // namespace cpu
}  // namespace tandem
