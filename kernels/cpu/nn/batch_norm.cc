// CPU batch normalization (training and evaluation, forward and backward), accumulating in double; f32 NCHW
// goes to batch_norm_f32.cc's vectorized kernels unless they are off.
#include <cmath>
#include <vector>

#include "kernels/cpu/nn/batch_norm_f32.h"
#include "kernels/cpu/nn/cpu_nn_backend.h"
#include "kernels/dispatch.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {

// Calls f(channel, element index) for every element of channels [c0, c1), each channel's elements in
// increasing (n, hw) order. NCHW visits a channel at a time; NHWC sweeps rows of channels.
template <typename F>
void for_channels(const BatchNormGeometry& g, int64_t c0, int64_t c1, F&& f) {
  if (g.channels_last) {
    for (int64_t m = 0; m < g.n * g.hw; ++m)
      for (int64_t c = c0; c < c1; ++c) f(c, m * g.c + c);
  } else {
    for (int64_t c = c0; c < c1; ++c)
      for (int64_t i = 0; i < g.n; ++i) {
        int64_t base = (i * g.c + c) * g.hw;
        for (int64_t p = 0; p < g.hw; ++p) f(c, base + p);
      }
  }
}

// Runs fn(c0, c1, acc) over channel ranges in parallel; acc is zeroed scratch of `per_channel` doubles
// per channel of the range.
template <typename F>
void channel_ranges(const BatchNormGeometry& g, int per_channel, F&& fn) {
  parallel_for(0, g.c, 8, [&](int64_t c0, int64_t c1) {
    std::vector<double> acc(static_cast<size_t>((c1 - c0) * per_channel), 0.0);
    fn(c0, c1, acc.data());
  });
}

template <typename T>
void forward_train(const BatchNormGeometry& g, const T* x, const T* weight, const T* bias, double eps, double momentum,
                   T* running_mean, T* running_var, T* y, T* save_mean, T* save_invstd) {
  const double m = static_cast<double>(g.n * g.hw);
  channel_ranges(g, 4, [&](int64_t c0, int64_t c1, double* acc) {
    // acc[4k]: sum, then mean; acc[4k+1]: centered sum of squares; acc[4k+2], acc[4k+3]: scale, shift.
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) { acc[4 * (c - c0)] += static_cast<double>(x[i]); });
    for (int64_t c = c0; c < c1; ++c) acc[4 * (c - c0)] /= m;
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) {
      double d = static_cast<double>(x[i]) - acc[4 * (c - c0)];
      acc[4 * (c - c0) + 1] += d * d;
    });
    for (int64_t c = c0; c < c1; ++c) {
      double* a = acc + 4 * (c - c0);
      double mean = a[0], var = a[1] / m, invstd = 1.0 / std::sqrt(var + eps);
      save_mean[c] = static_cast<T>(mean);
      save_invstd[c] = static_cast<T>(invstd);
      if (running_mean) {
        running_mean[c] = static_cast<T>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * mean);
        double unbiased = a[1] / (m - 1.0);
        running_var[c] = static_cast<T>((1.0 - momentum) * static_cast<double>(running_var[c]) + momentum * unbiased);
      }
      double w = weight ? static_cast<double>(weight[c]) : 1.0, b = bias ? static_cast<double>(bias[c]) : 0.0;
      a[2] = w * invstd;
      a[3] = b;
    }
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) {
      const double* a = acc + 4 * (c - c0);
      y[i] = static_cast<T>((static_cast<double>(x[i]) - a[0]) * a[2] + a[3]);
    });
  });
}

template <typename T>
void forward_eval(const BatchNormGeometry& g, const T* x, const T* weight, const T* bias, const T* running_mean,
                  const T* running_var, double eps, T* y) {
  channel_ranges(g, 3, [&](int64_t c0, int64_t c1, double* acc) {
    for (int64_t c = c0; c < c1; ++c) {
      double w = weight ? static_cast<double>(weight[c]) : 1.0, b = bias ? static_cast<double>(bias[c]) : 0.0;
      acc[3 * (c - c0)] = static_cast<double>(running_mean[c]);
      acc[3 * (c - c0) + 1] = w / std::sqrt(static_cast<double>(running_var[c]) + eps);
      acc[3 * (c - c0) + 2] = b;
    }
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) {
      const double* a = acc + 3 * (c - c0);
      y[i] = static_cast<T>((static_cast<double>(x[i]) - a[0]) * a[1] + a[2]);
    });
  });
}

template <typename T>
void backward(const BatchNormGeometry& g, bool training, const T* x, const T* dy, const T* weight, const T* mean,
              const T* invstd, T* dx, T* dweight, T* dbias) {
  const double m = static_cast<double>(g.n * g.hw);
  channel_ranges(g, 2, [&](int64_t c0, int64_t c1, double* acc) {
    // acc[2k]: sum of dy, acc[2k+1]: sum of dy * xhat.
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) {
      double d = static_cast<double>(dy[i]);
      double xhat = (static_cast<double>(x[i]) - static_cast<double>(mean[c])) * static_cast<double>(invstd[c]);
      acc[2 * (c - c0)] += d;
      acc[2 * (c - c0) + 1] += d * xhat;
    });
    for (int64_t c = c0; c < c1; ++c) {
      if (dbias) dbias[c] = static_cast<T>(acc[2 * (c - c0)]);
      if (dweight) dweight[c] = static_cast<T>(acc[2 * (c - c0) + 1]);
    }
    if (!dx) return;
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) {
      double w = weight ? static_cast<double>(weight[c]) : 1.0;
      double is = static_cast<double>(invstd[c]);
      double d = static_cast<double>(dy[i]);
      if (training) {
        double xhat = (static_cast<double>(x[i]) - static_cast<double>(mean[c])) * is;
        d -= (acc[2 * (c - c0)] + xhat * acc[2 * (c - c0) + 1]) / m;
      }
      dx[i] = static_cast<T>(w * is * d);
    });
  });
}

}  // namespace

void CpuNNBackend::batch_norm_forward_train(const BatchNormTrainArgs& args, const Stream&) {
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  auto fm = [](void* p) { return static_cast<float*>(p); };
  if (batch_norm_f32_forward_train(args.g, f(args.x), f(args.weight), f(args.bias), args.eps, args.momentum,
                                   fm(args.running_mean), fm(args.running_var), fm(args.y), fm(args.save_mean),
                                   fm(args.save_invstd)))
    return;
  TD_DISPATCH_FLOAT(args.g.dtype, "batch_norm", {
    forward_train(args.g, static_cast<const scalar_t*>(args.x), static_cast<const scalar_t*>(args.weight),
                  static_cast<const scalar_t*>(args.bias), args.eps, args.momentum,
                  static_cast<scalar_t*>(args.running_mean), static_cast<scalar_t*>(args.running_var),
                  static_cast<scalar_t*>(args.y), static_cast<scalar_t*>(args.save_mean),
                  static_cast<scalar_t*>(args.save_invstd));
  });
}

void CpuNNBackend::batch_norm_forward_eval(const BatchNormEvalArgs& args, const Stream&) {
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  if (batch_norm_f32_forward_eval(args.g, f(args.x), f(args.weight), f(args.bias), f(args.running_mean),
                                  f(args.running_var), args.eps, static_cast<float*>(args.y)))
    return;
  TD_DISPATCH_FLOAT(args.g.dtype, "batch_norm", {
    forward_eval(args.g, static_cast<const scalar_t*>(args.x), static_cast<const scalar_t*>(args.weight),
                 static_cast<const scalar_t*>(args.bias), static_cast<const scalar_t*>(args.running_mean),
                 static_cast<const scalar_t*>(args.running_var), args.eps, static_cast<scalar_t*>(args.y));
  });
}

void CpuNNBackend::batch_norm_backward(const BatchNormBackwardArgs& args, const Stream&) {
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  auto fm = [](void* p) { return static_cast<float*>(p); };
  if (batch_norm_f32_backward(args.g, args.training, f(args.x), f(args.dy), f(args.weight), f(args.mean),
                              f(args.invstd), fm(args.dx), fm(args.dweight), fm(args.dbias)))
    return;
  TD_DISPATCH_FLOAT(args.g.dtype, "batch_norm backward", {
    backward(args.g, args.training, static_cast<const scalar_t*>(args.x), static_cast<const scalar_t*>(args.dy),
             static_cast<const scalar_t*>(args.weight), static_cast<const scalar_t*>(args.mean),
             static_cast<const scalar_t*>(args.invstd), static_cast<scalar_t*>(args.dx),
             static_cast<scalar_t*>(args.dweight), static_cast<scalar_t*>(args.dbias));
  });
}

}  // namespace cpu
}  // namespace tandem
