// CPU convolution: the path select_cpu_conv_path chooses (conv_path.h), and the plain kernels: im2col + GEMM per
// group over chunks of images; a direct path when every output channel reads a single input channel (depthwise,
// or one input channel); NHWC through NCHW scratch copies. Results never depend on the number of threads: work is
// split into chunks fixed by the shapes alone. The plain kernels are the reference the other paths are tested
// against.
#include <algorithm>
#include <vector>

#include "kernels/cpu/bf16_widen.h"
#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/nn/conv_gemm.h"
#include "kernels/cpu/nn/conv_onednn.h"
#include "kernels/cpu/nn/conv_path.h"
#include "kernels/cpu/nn/cpu_nn_backend.h"
#include "kernels/cpu/nn/im2col.h"
#include "kernels/dispatch.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {

// Images are batched into one GEMM until it has this many output columns (small feature maps).
constexpr int64_t kTargetColumns = 1024;
// Weight-gradient accumulators: a fixed count, so the summation order is independent of the thread count.
constexpr int64_t kWeightSlots = 8;

struct Dims {
  int64_t cg, og, kg, hw, ohw;
  int64_t chunk, nchunks;  // images per GEMM, and the number of such chunks
  bool pointwise;          // 1x1, stride 1, no padding: an image is its own column matrix
};

Dims dims_of(const Conv2dGeometry& g) {
  Dims d;
  d.cg = g.c / g.groups;
  d.og = g.o / g.groups;
  d.kg = d.cg * g.kh * g.kw;
  d.hw = g.h * g.w;
  d.ohw = g.oh * g.ow;
  d.chunk = std::min(g.n, std::max<int64_t>(1, (kTargetColumns + d.ohw - 1) / std::max<int64_t>(d.ohw, 1)));
  d.nchunks = (g.n + d.chunk - 1) / d.chunk;
  d.pointwise = g.kh == 1 && g.kw == 1 && g.stride_h == 1 && g.stride_w == 1 && g.pad_h == 0 && g.pad_w == 0;
  return d;
}

// Calls fn(lo, hi) over chunks; a single chunk runs on this thread so that its GEMM may use the others.
void over_chunks(int64_t nchunks, const std::function<void(int64_t, int64_t)>& fn) {
  if (nchunks == 1)
    fn(0, 1);
  else
    parallel_for(0, nchunks, 1, fn);
}

template <typename T>
void forward_gemm(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  Dims d = dims_of(g);
  over_chunks(d.nchunks, [&](int64_t lo, int64_t hi) {
    std::vector<T> cols, ybuf;
    for (int64_t ch = lo; ch < hi; ++ch) {
      int64_t n0 = ch * d.chunk, cnt = std::min(d.chunk, g.n - n0), ld = cnt * d.ohw;
      const T* xc = x + n0 * g.c * d.hw;
      const T* colp = xc;
      if (!(d.pointwise && cnt == 1)) {
        cols.resize(static_cast<size_t>(g.c * g.kh * g.kw * ld));
        im2col(g, xc, cnt, ld, cols.data(), 0, g.c);
        colp = cols.data();
      }
      T* yc = y + n0 * g.o * d.ohw;
      T* out = yc;
      if (cnt > 1) {
        ybuf.resize(static_cast<size_t>(g.o * ld));
        out = ybuf.data();
      }
      for (int64_t gi = 0; gi < g.groups; ++gi)
        gemm_cpu<T>(false, false, d.og, ld, d.kg, T(1), w + gi * d.og * d.kg, d.kg, colp + gi * d.kg * ld, ld, T(0),
                    out + gi * d.og * ld, ld);
      // out is [o, cnt, ohw]: move it to y [cnt, o, ohw] and add the bias.
      for (int64_t img = 0; img < cnt; ++img)
        for (int64_t o = 0; o < g.o; ++o) {
          const T* src = out + (o * cnt + img) * d.ohw;
          T* dst = yc + (img * g.o + o) * d.ohw;
          T b = bias ? bias[o] : T(0);
          if (src == dst && !bias) continue;
          for (int64_t i = 0; i < d.ohw; ++i) dst[i] = src[i] + b;
        }
    }
  });
}

template <typename T>
void backward_data_gemm(const Conv2dGeometry& g, const T* dy, const T* w, T* dx) {
  Dims d = dims_of(g);
  over_chunks(d.nchunks, [&](int64_t lo, int64_t hi) {
    std::vector<T> cols, dybuf;
    for (int64_t ch = lo; ch < hi; ++ch) {
      int64_t n0 = ch * d.chunk, cnt = std::min(d.chunk, g.n - n0), ld = cnt * d.ohw;
      const T* dyc = dy + n0 * g.o * d.ohw;
      if (cnt > 1) {
        dybuf.resize(static_cast<size_t>(g.o * ld));
        gather_chunk(dyc, cnt, g.o, d.ohw, dybuf.data(), 0, g.o);
        dyc = dybuf.data();
      }
      T* dxc = dx + n0 * g.c * d.hw;
      bool direct = d.pointwise && cnt == 1;
      T* colp = dxc;
      if (!direct) {
        cols.resize(static_cast<size_t>(g.c * g.kh * g.kw * ld));
        colp = cols.data();
      }
      for (int64_t gi = 0; gi < g.groups; ++gi)
        gemm_cpu<T>(true, false, d.kg, ld, d.og, T(1), w + gi * d.og * d.kg, d.kg, dyc + gi * d.og * ld, ld, T(0),
                    colp + gi * d.kg * ld, ld);
      if (!direct) col2im(g, colp, cnt, ld, dxc, 0, g.c);
    }
  });
}

template <typename T>
void backward_weight_gemm(const Conv2dGeometry& g, const T* x, const T* dy, T* dw) {
  Dims d = dims_of(g);
  const int64_t wsize = g.o * d.kg;
  const int64_t slots = std::min(kWeightSlots, d.nchunks);
  std::vector<T> parts(static_cast<size_t>(slots * wsize), T(0));
  over_chunks(slots, [&](int64_t lo, int64_t hi) {
    std::vector<T> cols, dybuf;
    for (int64_t s = lo; s < hi; ++s)
      for (int64_t ch = s; ch < d.nchunks; ch += slots) {
        int64_t n0 = ch * d.chunk, cnt = std::min(d.chunk, g.n - n0), ld = cnt * d.ohw;
        const T* xc = x + n0 * g.c * d.hw;
        const T* colp = xc;
        if (!(d.pointwise && cnt == 1)) {
          cols.resize(static_cast<size_t>(g.c * g.kh * g.kw * ld));
          im2col(g, xc, cnt, ld, cols.data(), 0, g.c);
          colp = cols.data();
        }
        const T* dyc = dy + n0 * g.o * d.ohw;
        if (cnt > 1) {
          dybuf.resize(static_cast<size_t>(g.o * ld));
          gather_chunk(dyc, cnt, g.o, d.ohw, dybuf.data(), 0, g.o);
          dyc = dybuf.data();
        }
        T* part = parts.data() + s * wsize;
        for (int64_t gi = 0; gi < g.groups; ++gi)
          gemm_cpu<T>(false, true, d.og, d.kg, ld, T(1), dyc + gi * d.og * ld, ld, colp + gi * d.kg * ld, ld, T(1),
                      part + gi * d.og * d.kg, d.kg);
      }
  });
  for (int64_t i = 0; i < wsize; ++i) {
    double acc = 0;
    for (int64_t s = 0; s < slots; ++s) acc += static_cast<double>(parts[s * wsize + i]);
    dw[i] = static_cast<T>(acc);
  }
}

// Direct path for c / groups == 1: output channel oc reads input channel oc / (o / groups).
template <typename T>
void forward_direct(const Conv2dGeometry& g, const T* x, const T* w, const T* bias, T* y) {
  const int64_t mult = g.o / g.groups, hw = g.h * g.w, ohw = g.oh * g.ow;
  parallel_for(0, g.n * g.o, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      int64_t img = p / g.o, oc = p % g.o;
      const T* xp = x + (img * g.c + oc / mult) * hw;
      const T* wp = w + oc * g.kh * g.kw;
      T* yp = y + p * ohw;
      std::fill(yp, yp + ohw, T(0));
      for (int64_t ki = 0; ki < g.kh; ++ki) {
        int64_t yoff = ki * g.dilation_h - g.pad_h, ylo, yhi;
        valid_range(g.oh, g.stride_h, yoff, g.h, ylo, yhi);
        for (int64_t kj = 0; kj < g.kw; ++kj) {
          int64_t xoff = kj * g.dilation_w - g.pad_w, xlo, xhi;
          valid_range(g.ow, g.stride_w, xoff, g.w, xlo, xhi);
          T wv = wp[ki * g.kw + kj];
          for (int64_t oy = ylo; oy < yhi; ++oy) {
            const T* in = xp + (oy * g.stride_h + yoff) * g.w;
            T* out = yp + oy * g.ow;
            if (g.stride_w == 1)
              for (int64_t ox = xlo; ox < xhi; ++ox) out[ox] += wv * in[ox + xoff];
            else
              for (int64_t ox = xlo; ox < xhi; ++ox) out[ox] += wv * in[ox * g.stride_w + xoff];
          }
        }
      }
      if (bias)
        for (int64_t i = 0; i < ohw; ++i) yp[i] += bias[oc];
    }
  });
}

template <typename T>
void backward_data_direct(const Conv2dGeometry& g, const T* dy, const T* w, T* dx) {
  const int64_t mult = g.o / g.groups, hw = g.h * g.w, ohw = g.oh * g.ow;
  parallel_for(0, g.n * g.c, 4, [&](int64_t lo, int64_t hi) {
    for (int64_t p = lo; p < hi; ++p) {
      int64_t img = p / g.c, c = p % g.c;
      T* dxp = dx + p * hw;
      std::fill(dxp, dxp + hw, T(0));
      for (int64_t m = 0; m < mult; ++m) {
        int64_t oc = c * mult + m;
        const T* dyp = dy + (img * g.o + oc) * ohw;
        const T* wp = w + oc * g.kh * g.kw;
        for (int64_t ki = 0; ki < g.kh; ++ki) {
          int64_t yoff = ki * g.dilation_h - g.pad_h, ylo, yhi;
          valid_range(g.oh, g.stride_h, yoff, g.h, ylo, yhi);
          for (int64_t kj = 0; kj < g.kw; ++kj) {
            int64_t xoff = kj * g.dilation_w - g.pad_w, xlo, xhi;
            valid_range(g.ow, g.stride_w, xoff, g.w, xlo, xhi);
            T wv = wp[ki * g.kw + kj];
            for (int64_t oy = ylo; oy < yhi; ++oy) {
              T* out = dxp + (oy * g.stride_h + yoff) * g.w;
              const T* in = dyp + oy * g.ow;
              if (g.stride_w == 1)
                for (int64_t ox = xlo; ox < xhi; ++ox) out[ox + xoff] += wv * in[ox];
              else
                for (int64_t ox = xlo; ox < xhi; ++ox) out[ox * g.stride_w + xoff] += wv * in[ox];
            }
          }
        }
      }
    }
  });
}

template <typename T>
void backward_weight_direct(const Conv2dGeometry& g, const T* x, const T* dy, T* dw) {
  const int64_t mult = g.o / g.groups, hw = g.h * g.w, ohw = g.oh * g.ow, taps = g.kh * g.kw;
  parallel_for(0, g.o, 1, [&](int64_t lo, int64_t hi) {
    std::vector<double> acc(static_cast<size_t>(taps));
    for (int64_t oc = lo; oc < hi; ++oc) {
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int64_t img = 0; img < g.n; ++img) {
        const T* xp = x + (img * g.c + oc / mult) * hw;
        const T* dyp = dy + (img * g.o + oc) * ohw;
        for (int64_t ki = 0; ki < g.kh; ++ki) {
          int64_t yoff = ki * g.dilation_h - g.pad_h, ylo, yhi;
          valid_range(g.oh, g.stride_h, yoff, g.h, ylo, yhi);
          for (int64_t kj = 0; kj < g.kw; ++kj) {
            int64_t xoff = kj * g.dilation_w - g.pad_w, xlo, xhi;
            valid_range(g.ow, g.stride_w, xoff, g.w, xlo, xhi);
            T s = T(0);  // one image's sum in T, images summed in double
            for (int64_t oy = ylo; oy < yhi; ++oy) {
              const T* in = xp + (oy * g.stride_h + yoff) * g.w;
              const T* d = dyp + oy * g.ow;
              for (int64_t ox = xlo; ox < xhi; ++ox) s += d[ox] * in[ox * g.stride_w + xoff];
            }
            acc[ki * g.kw + kj] += static_cast<double>(s);
          }
        }
      }
      for (int64_t t = 0; t < taps; ++t) dw[oc * taps + t] = static_cast<T>(acc[t]);
    }
  });
}

// Runs an NCHW kernel on channels-last operands through NCHW copies of them.
struct Scratch {
  Conv2dGeometry g;  // the NCHW geometry
  int64_t x_size, w_size, y_size;
};

Scratch nchw_scratch(const Conv2dGeometry& g) {
  Scratch s{g, g.n * g.c * g.h * g.w, g.o * (g.c / g.groups) * g.kh * g.kw, g.n * g.o * g.oh * g.ow};
  s.g.channels_last = false;
  return s;
}

template <typename T>
void plain_forward(const Conv2dGeometry& g, CpuConvPath path, const T* x, const T* w, const T* bias, T* y) {
  if (g.channels_last) {
    Scratch s = nchw_scratch(g);
    std::vector<T> xs(s.x_size), ws(s.w_size), ys(s.y_size);
    nhwc_to_nchw(x, xs.data(), g.n, g.c, g.h * g.w);
    nhwc_to_nchw(w, ws.data(), g.o, g.c / g.groups, g.kh * g.kw);
    plain_forward(s.g, path, xs.data(), ws.data(), bias, ys.data());
    nchw_to_nhwc(ys.data(), y, g.n, g.o, g.oh * g.ow);
    return;
  }
  if (path == CpuConvPath::direct)
    forward_direct(g, x, w, bias, y);
  else
    forward_gemm(g, x, w, bias, y);
}

template <typename T>
void plain_backward_data(const Conv2dGeometry& g, CpuConvPath path, const T* dy, const T* w, T* dx) {
  if (g.channels_last) {
    Scratch s = nchw_scratch(g);
    std::vector<T> dys(s.y_size), ws(s.w_size), dxs(s.x_size);
    nhwc_to_nchw(dy, dys.data(), g.n, g.o, g.oh * g.ow);
    nhwc_to_nchw(w, ws.data(), g.o, g.c / g.groups, g.kh * g.kw);
    plain_backward_data(s.g, path, dys.data(), ws.data(), dxs.data());
    nchw_to_nhwc(dxs.data(), dx, g.n, g.c, g.h * g.w);
    return;
  }
  if (path == CpuConvPath::direct)
    backward_data_direct(g, dy, w, dx);
  else
    backward_data_gemm(g, dy, w, dx);
}

template <typename T>
void plain_backward_weight(const Conv2dGeometry& g, CpuConvPath path, const T* x, const T* dy, T* dw) {
  if (g.channels_last) {
    Scratch s = nchw_scratch(g);
    std::vector<T> xs(s.x_size), dys(s.y_size), dws(s.w_size);
    nhwc_to_nchw(x, xs.data(), g.n, g.c, g.h * g.w);
    nhwc_to_nchw(dy, dys.data(), g.n, g.o, g.oh * g.ow);
    plain_backward_weight(s.g, path, xs.data(), dys.data(), dws.data());
    nchw_to_nhwc(dws.data(), dw, g.o, g.c / g.groups, g.kh * g.kw);
    return;
  }
  if (path == CpuConvPath::direct)
    backward_weight_direct(g, x, dy, dw);
  else
    backward_weight_gemm(g, x, dy, dw);
}

}  // namespace

template <typename T>
void nchw_to_nhwc(const T* src, T* dst, int64_t n, int64_t c, int64_t hw) {
  parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t p = 0; p < hw; ++p) dst[(i * hw + p) * c + ch] = src[(i * c + ch) * hw + p];
  });
}

template <typename T>
void nhwc_to_nchw(const T* src, T* dst, int64_t n, int64_t c, int64_t hw) {
  parallel_for(0, n, 1, [&](int64_t lo, int64_t hi) {
    for (int64_t i = lo; i < hi; ++i)
      for (int64_t ch = 0; ch < c; ++ch)
        for (int64_t p = 0; p < hw; ++p) dst[(i * c + ch) * hw + p] = src[(i * hw + p) * c + ch];
  });
}

template void nchw_to_nhwc<float>(const float*, float*, int64_t, int64_t, int64_t);
template void nchw_to_nhwc<double>(const double*, double*, int64_t, int64_t, int64_t);
template void nhwc_to_nchw<float>(const float*, float*, int64_t, int64_t, int64_t);
template void nhwc_to_nchw<double>(const double*, double*, int64_t, int64_t, int64_t);

namespace {
// The geometry of a bf16 convolution's f32 computation, and its tensors' element counts.
Conv2dGeometry as_f32(const Conv2dGeometry& g) {
  Conv2dGeometry f = g;
  f.dtype = DType::F32;
  return f;
}
int64_t input_elements(const Conv2dGeometry& g) { return g.n * g.c * g.h * g.w; }
int64_t output_elements(const Conv2dGeometry& g) { return g.n * g.o * g.oh * g.ow; }
}  // namespace

// bf16: oneDNN's native bf16 kernels where the processor has them (f32 accumulation, the result rounded once),
// else each pass in f32 on widened operands, rounded once (cpu/bf16_widen.h): the same rounding points.
void CpuNNBackend::conv2d_forward(const Conv2dForwardArgs& args, const Stream& s) {
  const Conv2dGeometry& g = args.g;
  TD_CHECK(g.dtype != DType::BF16 || args.bias == nullptr,
           "conv2d_forward in bf16 takes no bias (conv2d adds it to the rounded result)");
  const CpuConvPath path = select_cpu_conv_path(g, ConvPass::forward, args.bias != nullptr);
  if (path == CpuConvPath::widened) {
    const std::vector<float> x = widen_bf16(args.x, input_elements(g)),
                             w = widen_bf16(args.w, conv2d_weight_elements(g));
    std::vector<float> y(static_cast<size_t>(output_elements(g)));
    conv2d_forward({as_f32(g), x.data(), w.data(), nullptr, y.data()}, s);
    return round_to_bf16(y.data(), output_elements(g), args.y);
  }
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  switch (path) {
    case CpuConvPath::gemm:
      return conv_gemm_forward(g, f(args.x), f(args.w), f(args.bias), static_cast<float*>(args.y));
    case CpuConvPath::onednn: return onednn_conv_forward(g, args.x, args.w, f(args.bias), args.y);
    case CpuConvPath::direct:
    case CpuConvPath::im2col:
    case CpuConvPath::widened:
      TD_DISPATCH_FLOAT(g.dtype, "conv2d", {
        plain_forward(g, path, static_cast<const scalar_t*>(args.x), static_cast<const scalar_t*>(args.w),
                      static_cast<const scalar_t*>(args.bias), static_cast<scalar_t*>(args.y));
      });
  }
}

void CpuNNBackend::conv2d_backward_data(const Conv2dBackwardDataArgs& args, const Stream& s) {
  const Conv2dGeometry& g = args.g;
  const CpuConvPath path = select_cpu_conv_path(g, ConvPass::backward_data, false);
  if (path == CpuConvPath::widened) {
    const std::vector<float> dy = widen_bf16(args.dy, output_elements(g));
    const std::vector<float> w = widen_bf16(args.w, conv2d_weight_elements(g));
    std::vector<float> dx(static_cast<size_t>(input_elements(g)));
    conv2d_backward_data({as_f32(g), dy.data(), w.data(), dx.data()}, s);
    return round_to_bf16(dx.data(), input_elements(g), args.dx);
  }
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  switch (path) {
    case CpuConvPath::gemm: return conv_gemm_backward_data(g, f(args.dy), f(args.w), static_cast<float*>(args.dx));
    case CpuConvPath::onednn: return onednn_conv_backward_data(g, args.dy, args.w, args.dx);
    case CpuConvPath::direct:
    case CpuConvPath::im2col:
    case CpuConvPath::widened:
      TD_DISPATCH_FLOAT(g.dtype, "conv2d backward", {
        plain_backward_data(g, path, static_cast<const scalar_t*>(args.dy), static_cast<const scalar_t*>(args.w),
                            static_cast<scalar_t*>(args.dx));
      });
  }
}

void CpuNNBackend::conv2d_backward_weight(const Conv2dBackwardWeightArgs& args, const Stream& s) {
  const Conv2dGeometry& g = args.g;
  const CpuConvPath path = select_cpu_conv_path(g, ConvPass::backward_weight, false);
  if (g.dtype == DType::BF16) {  // the f32 gradient, rounded once
    std::vector<float> dw(static_cast<size_t>(conv2d_weight_elements(g)));
    if (path == CpuConvPath::onednn) {
      onednn_conv_backward_weight(g, args.x, args.dy, dw.data());
    } else {
      const std::vector<float> x = widen_bf16(args.x, input_elements(g)), dy = widen_bf16(args.dy, output_elements(g));
      conv2d_backward_weight({as_f32(g), x.data(), dy.data(), dw.data()}, s);
    }
    return round_to_bf16(dw.data(), conv2d_weight_elements(g), args.dw);
  }
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  switch (path) {
    case CpuConvPath::gemm: return conv_gemm_backward_weight(g, f(args.x), f(args.dy), static_cast<float*>(args.dw));
    case CpuConvPath::onednn: return onednn_conv_backward_weight(g, args.x, args.dy, static_cast<float*>(args.dw));
    case CpuConvPath::direct:
    case CpuConvPath::im2col:
    case CpuConvPath::widened:
      TD_DISPATCH_FLOAT(g.dtype, "conv2d backward", {
        plain_backward_weight(g, path, static_cast<const scalar_t*>(args.x), static_cast<const scalar_t*>(args.dy),
                              static_cast<scalar_t*>(args.dw));
      });
  }
}

}  // namespace cpu
}  // namespace tandem
