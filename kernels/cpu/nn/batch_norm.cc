// CPU batch normalization (training and evaluation, forward and backward), accumulating in double; f32 NCHW
// and bf16 NCHW go to batch_norm_f32.cc's vectorized kernels unless they are off; bf16 NHWC (f32 parameters and
// statistics) takes the plain kernels here, widened per element.
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

// An activation as double (bf16 widened exactly), and a result stored as T: through compute_t<T>, so a bf16 result
// is the f32 kernels' result rounded once more to nearest even, as f32 kernels on widened copies gave.
template <typename T>
double wide(T v) {
  return static_cast<double>(static_cast<compute_t<T>>(v));
}
template <typename T>
T narrow(double v) {
  return static_cast<T>(static_cast<compute_t<T>>(v));
}

// The fused epilogue: act(v + residual[i]) (residual may be null), and act's derivative read from its output.
template <typename T>
double epilogue(double v, const T* residual, int64_t i, BnActivation act) {
  if (residual) v += wide(residual[i]);
  if (act == BnActivation::None) return v;
  v = v > 0.0 ? v : 0.0;
  return act == BnActivation::Relu6 && v > 6.0 ? 6.0 : v;
}
template <typename T>
bool passes(T y, BnActivation act) {
  const double v = wide(y);
  return act == BnActivation::None || (v > 0.0 && (act == BnActivation::Relu || v < 6.0));
}

// T: the activations' type; P = compute_t<T>: the per-channel operands' (f32 for bf16).
template <typename T, typename P = compute_t<T>>
void forward_train(const BatchNormGeometry& g, const T* x, const P* weight, const P* bias, double eps, double momentum,
                   P* running_mean, P* running_var, T* y, P* save_mean, P* save_invstd, const T* residual = nullptr,
                   BnActivation act = BnActivation::None) {
  const double m = static_cast<double>(g.n * g.hw);
  channel_ranges(g, 4, [&](int64_t c0, int64_t c1, double* acc) {
    // acc[4k]: sum, then mean; acc[4k+1]: centered sum of squares; acc[4k+2], acc[4k+3]: scale, shift.
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) { acc[4 * (c - c0)] += wide(x[i]); });
    for (int64_t c = c0; c < c1; ++c) acc[4 * (c - c0)] /= m;
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) {
      double d = wide(x[i]) - acc[4 * (c - c0)];
      acc[4 * (c - c0) + 1] += d * d;
    });
    for (int64_t c = c0; c < c1; ++c) {
      double* a = acc + 4 * (c - c0);
      double mean = a[0], var = a[1] / m, invstd = 1.0 / std::sqrt(var + eps);
      save_mean[c] = static_cast<P>(mean);
      save_invstd[c] = static_cast<P>(invstd);
      if (running_mean) {
        running_mean[c] = static_cast<P>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * mean);
        double unbiased = a[1] / (m - 1.0);
        running_var[c] = static_cast<P>((1.0 - momentum) * static_cast<double>(running_var[c]) + momentum * unbiased);
      }
      double w = weight ? static_cast<double>(weight[c]) : 1.0, b = bias ? static_cast<double>(bias[c]) : 0.0;
      a[2] = w * invstd;
      a[3] = b;
    }
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) {
      const double* a = acc + 4 * (c - c0);
      y[i] = narrow<T>(epilogue((wide(x[i]) - a[0]) * a[2] + a[3], residual, i, act));
    });
  });
}

template <typename T, typename P = compute_t<T>>
void forward_eval(const BatchNormGeometry& g, const T* x, const P* weight, const P* bias, const P* running_mean,
                  const P* running_var, double eps, T* y, const T* residual = nullptr,
                  BnActivation act = BnActivation::None) {
  channel_ranges(g, 3, [&](int64_t c0, int64_t c1, double* acc) {
    for (int64_t c = c0; c < c1; ++c) {
      double w = weight ? static_cast<double>(weight[c]) : 1.0, b = bias ? static_cast<double>(bias[c]) : 0.0;
      acc[3 * (c - c0)] = static_cast<double>(running_mean[c]);
      acc[3 * (c - c0) + 1] = w / std::sqrt(static_cast<double>(running_var[c]) + eps);
      acc[3 * (c - c0) + 2] = b;
    }
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) {
      const double* a = acc + 3 * (c - c0);
      y[i] = narrow<T>(epilogue((wide(x[i]) - a[0]) * a[1] + a[2], residual, i, act));
    });
  });
}

template <typename T, typename P = compute_t<T>>
void backward(const BatchNormGeometry& g, bool training, const T* x, const T* dy, const P* weight, const P* mean,
              const P* invstd, T* dx, P* dweight, P* dbias, const T* y = nullptr, BnActivation act = BnActivation::None,
              bool accumulate_dresidual = false, T* dresidual = nullptr) {
  // dy masked by the activation's derivative (the residual's gradient); the first pass also stores it.
  auto grad = [&](int64_t i) { return y == nullptr || passes(y[i], act) ? wide(dy[i]) : 0.0; };
  const double m = static_cast<double>(g.n * g.hw);
  channel_ranges(g, 2, [&](int64_t c0, int64_t c1, double* acc) {
    // acc[2k]: sum of dy, acc[2k+1]: sum of dy * xhat.
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) {
      double d = grad(i);
      if (dresidual)
        dresidual[i] = accumulate_dresidual ? narrow<T>(static_cast<P>(dresidual[i]) + static_cast<P>(narrow<T>(d)))
                                            : narrow<T>(d);
      double xhat = (wide(x[i]) - static_cast<double>(mean[c])) * static_cast<double>(invstd[c]);
      acc[2 * (c - c0)] += d;
      acc[2 * (c - c0) + 1] += d * xhat;
    });
    for (int64_t c = c0; c < c1; ++c) {
      if (dbias) dbias[c] = static_cast<P>(acc[2 * (c - c0)]);
      if (dweight) dweight[c] = static_cast<P>(acc[2 * (c - c0) + 1]);
    }
    if (!dx) return;
    for_channels(g, c0, c1, [&](int64_t c, int64_t i) {
      double w = weight ? static_cast<double>(weight[c]) : 1.0;
      double is = static_cast<double>(invstd[c]);
      double d = grad(i);
      if (training) {
        double xhat = (wide(x[i]) - static_cast<double>(mean[c])) * is;
        d -= (acc[2 * (c - c0)] + xhat * acc[2 * (c - c0) + 1]) / m;
      }
      dx[i] = narrow<T>(w * is * d);
    });
  });
}

}  // namespace

void CpuNNBackend::batch_norm_forward_train(const BatchNormTrainArgs& args, const Stream&) {
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  auto fm = [](void* p) { return static_cast<float*>(p); };
  if (batch_norm_f32_forward_train(args.g, args.x, f(args.weight), f(args.bias), args.eps, args.momentum,
                                   fm(args.running_mean), fm(args.running_var), args.y, fm(args.save_mean),
                                   fm(args.save_invstd)))
    return;
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "batch_norm", {
    using P = compute_t<scalar_t>;
    forward_train(args.g, static_cast<const scalar_t*>(args.x), static_cast<const P*>(args.weight),
                  static_cast<const P*>(args.bias), args.eps, args.momentum, static_cast<P*>(args.running_mean),
                  static_cast<P*>(args.running_var), static_cast<scalar_t*>(args.y), static_cast<P*>(args.save_mean),
                  static_cast<P*>(args.save_invstd));
  });
}

void CpuNNBackend::batch_norm_forward_eval(const BatchNormEvalArgs& args, const Stream&) {
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  if (batch_norm_f32_forward_eval(args.g, args.x, f(args.weight), f(args.bias), f(args.running_mean),
                                  f(args.running_var), args.eps, args.y))
    return;
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "batch_norm", {
    using P = compute_t<scalar_t>;
    forward_eval(args.g, static_cast<const scalar_t*>(args.x), static_cast<const P*>(args.weight),
                 static_cast<const P*>(args.bias), static_cast<const P*>(args.running_mean),
                 static_cast<const P*>(args.running_var), args.eps, static_cast<scalar_t*>(args.y));
  });
}

void CpuNNBackend::batch_norm_backward(const BatchNormBackwardArgs& args, const Stream&) {
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  auto fm = [](void* p) { return static_cast<float*>(p); };
  if (batch_norm_f32_backward(args.g, args.training, args.x, args.dy, f(args.weight), f(args.mean), f(args.invstd),
                              args.dx, fm(args.dweight), fm(args.dbias)))
    return;
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "batch_norm backward", {
    using P = compute_t<scalar_t>;
    backward(args.g, args.training, static_cast<const scalar_t*>(args.x), static_cast<const scalar_t*>(args.dy),
             static_cast<const P*>(args.weight), static_cast<const P*>(args.mean), static_cast<const P*>(args.invstd),
             static_cast<scalar_t*>(args.dx), static_cast<P*>(args.dweight), static_cast<P*>(args.dbias));
  });
}

void CpuNNBackend::batch_norm_act_forward_train(const BatchNormActTrainArgs& args, const Stream&) {
  const BatchNormTrainArgs& a = args.bn;
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  auto fm = [](void* p) { return static_cast<float*>(p); };
  if (batch_norm_f32_forward_train(a.g, a.x, f(a.weight), f(a.bias), a.eps, a.momentum, fm(a.running_mean),
                                   fm(a.running_var), a.y, fm(a.save_mean), fm(a.save_invstd), args.residual, args.act))
    return;
  TD_DISPATCH_FLOAT_BF16(a.g.dtype, "batch_norm_act", {
    using T = scalar_t;
    using P = compute_t<T>;
    forward_train(a.g, static_cast<const T*>(a.x), static_cast<const P*>(a.weight), static_cast<const P*>(a.bias),
                  a.eps, a.momentum, static_cast<P*>(a.running_mean), static_cast<P*>(a.running_var),
                  static_cast<T*>(a.y), static_cast<P*>(a.save_mean), static_cast<P*>(a.save_invstd),
                  static_cast<const T*>(args.residual), args.act);
  });
}

void CpuNNBackend::batch_norm_act_forward_eval(const BatchNormActEvalArgs& args, const Stream&) {
  const BatchNormEvalArgs& a = args.bn;
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  if (batch_norm_f32_forward_eval(a.g, a.x, f(a.weight), f(a.bias), f(a.running_mean), f(a.running_var), a.eps, a.y,
                                  args.residual, args.act))
    return;
  TD_DISPATCH_FLOAT_BF16(a.g.dtype, "batch_norm_act", {
    using T = scalar_t;
    using P = compute_t<T>;
    forward_eval(a.g, static_cast<const T*>(a.x), static_cast<const P*>(a.weight), static_cast<const P*>(a.bias),
                 static_cast<const P*>(a.running_mean), static_cast<const P*>(a.running_var), a.eps,
                 static_cast<T*>(a.y), static_cast<const T*>(args.residual), args.act);
  });
}

void CpuNNBackend::batch_norm_act_backward(const BatchNormActBackwardArgs& args, const Stream&) {
  const BatchNormBackwardArgs& a = args.bn;
  auto f = [](const void* p) { return static_cast<const float*>(p); };
  auto fm = [](void* p) { return static_cast<float*>(p); };
  if (batch_norm_f32_backward(a.g, a.training, a.x, a.dy, f(a.weight), f(a.mean), f(a.invstd), a.dx, fm(a.dweight),
                              fm(a.dbias), {args.y, args.act, args.accumulate_dresidual, args.dresidual}))
    return;
  TD_DISPATCH_FLOAT_BF16(a.g.dtype, "batch_norm_act backward", {
    using T = scalar_t;
    using P = compute_t<T>;
    backward(a.g, a.training, static_cast<const T*>(a.x), static_cast<const T*>(a.dy), static_cast<const P*>(a.weight),
             static_cast<const P*>(a.mean), static_cast<const P*>(a.invstd), static_cast<T*>(a.dx),
             static_cast<P*>(a.dweight), static_cast<P*>(a.dbias), static_cast<const T*>(args.y), args.act,
             args.accumulate_dresidual, static_cast<T*>(args.dresidual));
  });
}

}  // namespace cpu
}  // namespace tandem
