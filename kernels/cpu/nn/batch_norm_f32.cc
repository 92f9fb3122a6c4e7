// Vectorized f32 NCHW batch normalization, with batch_norm_act's residual add and ReLU(6) fused: each plane of a
// channel is swept in 8-lane double vectors (GCC vector extensions, compiled for AVX-512, AVX2 and plain x86-64, picked
// at load time; lanewise IEEE arithmetic without contraction, so every version gives the same bits). bf16 planes are
// staged through f32 ones (widened on the way in, each result rounded once on the way out).
#include "kernels/cpu/nn/batch_norm_f32.h"

#include <algorithm>
#include <cmath>
#include <type_traits>
#include <vector>

#include "runtime/base/half.h"

#include "runtime/base/config.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {

typedef double Lanes __attribute__((vector_size(64)));  // 8 doubles
#define TD_BN_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))

// Loads and stores are macros and lane_sum takes a reference: a function passing an 8-double vector by value
// would change the ABI between the clones (clang refuses it; GCC warns).
typedef float UnalignedFloats __attribute__((vector_size(32), aligned(4), may_alias));
#define TD_BN_LOAD(p) __builtin_convertvector(*reinterpret_cast<const UnalignedFloats*>(p), Lanes)
#define TD_BN_STORE(p, v) (*reinterpret_cast<UnalignedFloats*>(p) = __builtin_convertvector((v), UnalignedFloats))
inline double lane_sum(const Lanes& v) {
  double s = 0;
  for (int k = 0; k < 8; ++k) s += v[k];
  return s;
}

// Σ x over n elements: lane sums over whole groups of 8, the lanes added in order, then the tail.
TD_BN_CLONES double plane_sum(const float* x, int64_t n) {
  Lanes acc = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) acc += TD_BN_LOAD(x + i);
  double s = lane_sum(acc);
  for (; i < n; ++i) s += static_cast<double>(x[i]);
  return s;
}

// Σ (x - mean)^2, in the same order.
TD_BN_CLONES double plane_centered_squares(const float* x, int64_t n, double mean) {
  Lanes acc = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Lanes d = TD_BN_LOAD(x + i) - mean;
    acc += d * d;
  }
  double s = lane_sum(acc);
  for (; i < n; ++i) {
    double d = static_cast<double>(x[i]) - mean;
    s += d * d;
  }
  return s;
}

// dy's 8 floats at p where 0 < y <= hi (y's floats at q), else 0, as doubles. The comparisons are of floats: GCC
// turns double comparisons of converted floats into scalar ones.
typedef float Floats __attribute__((vector_size(32)));
typedef int32_t FloatMask __attribute__((vector_size(32)));
#define TD_BN_MASKED(p, q, zero, hi)                                                                    \
  __builtin_convertvector((Floats)((FloatMask)(Floats)(*reinterpret_cast<const UnalignedFloats*>(p)) &  \
                                   (((Floats)(*reinterpret_cast<const UnalignedFloats*>(q)) > (zero)) & \
                                    ((Floats)(*reinterpret_cast<const UnalignedFloats*>(q)) <= (hi)))), \
                          Lanes)

// The fused forward's epilogue: act's clamp to [0, cap] (cap: +inf for ReLU) when on.
struct Epilogue {
  bool clamp;
  double cap;
};
Epilogue epilogue_of(BnActivation act) {
  return {act != BnActivation::None, act == BnActivation::Relu6 ? 6.0 : HUGE_VAL};
}
inline double clamp_scalar(double v, const Epilogue& e) {
  if (!e.clamp) return v;
  v = v > 0.0 ? v : 0.0;
  return v > e.cap ? e.cap : v;
}

// y = act((x - mean) * scale + shift + residual), residual may be null.
TD_BN_CLONES void plane_affine(const float* x, int64_t n, double mean, double scale, double shift,
                               const float* residual, const Epilogue& e, float* y) {
  const bool clamp = e.clamp;
  const Lanes zero = {}, cap = zero + e.cap;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    Lanes v = (TD_BN_LOAD(x + i) - mean) * scale + shift;
    if (residual) v += TD_BN_LOAD(residual + i);
    if (clamp) {
      v = v > zero ? v : zero;  // NaN to 0, as the scalar clamp; vector operands: scalar ones scalarize it
      v = v > cap ? cap : v;
    }
    TD_BN_STORE(y + i, v);
  }
  for (; i < n; ++i) {
    double v = (static_cast<double>(x[i]) - mean) * scale + shift;
    if (residual) v += static_cast<double>(residual[i]);
    y[i] = static_cast<float>(clamp_scalar(v, e));
  }
}

// One plane's backward operands: dy kept where 0 < y <= hi (y null: everywhere; hi: the largest float below 6
// for ReLU6, +inf for ReLU), the kept gradient stored to dres (null: nowhere; added with accumulate).
struct GradPlane {
  const float* x;
  const float* dy;
  const float* y;
  float* dres;
  float hi;
  bool accumulate;
};
inline double masked_scalar(const float* dy, const float* y, float hi, int64_t i) {
  if (!y) return static_cast<double>(dy[i]);
  return y[i] > 0.f && y[i] <= hi ? static_cast<double>(dy[i]) : 0.0;
}

// Adds Σ g to *sum_dy and Σ g * (x - mean) to *sum_dy_xc, g the masked dy (stored to p.dres).
TD_BN_CLONES void plane_grad_sums(const GradPlane& p, int64_t n, double mean, double* sum_dy, double* sum_dy_xc) {
  // Locals: the may_alias stores could otherwise change p's fields, which every iteration would reload.
  const float *x = p.x, *dy = p.dy, *y = p.y;
  float* dres = p.dres;
  const bool accumulate = p.accumulate;
  const Floats zero = {}, hi = zero + p.hi;
  Lanes a = {}, b = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Lanes d = y ? TD_BN_MASKED(dy + i, y + i, zero, hi) : TD_BN_LOAD(dy + i);
    if (dres) TD_BN_STORE(dres + i, accumulate ? TD_BN_LOAD(dres + i) + d : d);
    a += d;
    b += d * (TD_BN_LOAD(x + i) - mean);
  }
  double sa = lane_sum(a), sb = lane_sum(b);
  for (; i < n; ++i) {
    const double d = masked_scalar(dy, y, p.hi, i);
    if (dres) dres[i] = static_cast<float>(accumulate ? static_cast<double>(dres[i]) + d : d);
    sa += d;
    sb += d * (static_cast<double>(x[i]) - mean);
  }
  *sum_dy += sa;
  *sum_dy_xc += sb;
}

// dx = a * g + b * (x - mean) + c, g the masked dy.
TD_BN_CLONES void plane_grad_input(const GradPlane& p, int64_t n, double mean, double a, double b, double c,
                                   float* dx) {
  const float *x = p.x, *dy = p.dy, *y = p.y;
  const Floats zero = {}, hi = zero + p.hi;
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const Lanes d = y ? TD_BN_MASKED(dy + i, y + i, zero, hi) : TD_BN_LOAD(dy + i);
    TD_BN_STORE(dx + i, d * a + (TD_BN_LOAD(x + i) - mean) * b + c);
  }
  for (; i < n; ++i)
    dx[i] = static_cast<float>(masked_scalar(dy, y, p.hi, i) * a + (static_cast<double>(x[i]) - mean) * b + c);
}

bool applies(const BatchNormGeometry& g) {
  return (g.dtype == DType::F32 || g.dtype == DType::BF16) && !g.channels_last && cpu_onednn();
}

// A plane of activations of type T (float or BFloat16) as the f32 kernels take it: f32 planes in place, bf16 ones
// widened into (or computed in) one of a channel's staging planes and rounded to nearest even into place.
template <typename T>
struct Staging {
  static constexpr bool kF32 = std::is_same<T, float>::value;
  explicit Staging(int64_t hw) : n(hw), buf(kF32 ? 0 : static_cast<size_t>(5 * hw)) {}
  float* plane(int k) { return buf.data() + k * n; }
  // p's values as floats (in staging plane k for bf16).
  const float* in(const T* p, int k) {
    if constexpr (kF32) {
      return p;
    } else {
      float* b = plane(k);
      for (int64_t i = 0; i < n; ++i) b[i] = static_cast<float>(p[i]);
      return b;
    }
  }
  // Where results for p go before store (p itself for f32).
  float* out(T* p, int k) {
    if constexpr (kF32)
      return p;
    else
      return plane(k);
  }
  void store(T* p, const float* f) {
    if constexpr (!kF32)
      for (int64_t i = 0; i < n; ++i) p[i] = BFloat16(f[i]);
  }
  int64_t n;
  std::vector<float> buf;
};
enum StagingPlane { kX, kResidual, kY, kDy, kOut };

// Runs fn(c) for every channel, channels split over the pool in ranges of about 32K elements.
template <typename F>
void for_each_channel(const BatchNormGeometry& g, F&& fn) {
  const int64_t per_channel = std::max<int64_t>(g.n * g.hw, 1);
  parallel_for(0, g.c, std::max<int64_t>(1, (int64_t(1) << 15) / per_channel), [&](int64_t c0, int64_t c1) {
    for (int64_t c = c0; c < c1; ++c) fn(c);
  });
}

template <typename T>
void forward_train(const BatchNormGeometry& g, const T* x, const float* weight, const float* bias, double eps,
                   double momentum, float* running_mean, float* running_var, T* y, float* save_mean, float* save_invstd,
                   const T* residual, BnActivation act) {
  const Epilogue e = epilogue_of(act);
  const double m = static_cast<double>(g.n * g.hw);
  for_each_channel(g, [&](int64_t c) {
    Staging<T> st(g.hw);
    auto plane = [&](int64_t i) { return (i * g.c + c) * g.hw; };
    double sum = 0;
    for (int64_t i = 0; i < g.n; ++i) sum += plane_sum(st.in(x + plane(i), kX), g.hw);
    const double mean = sum / m;
    double squares = 0;
    for (int64_t i = 0; i < g.n; ++i) squares += plane_centered_squares(st.in(x + plane(i), kX), g.hw, mean);
    const double invstd = 1.0 / std::sqrt(squares / m + eps);
    save_mean[c] = static_cast<float>(mean);
    save_invstd[c] = static_cast<float>(invstd);
    if (running_mean) {
      running_mean[c] = static_cast<float>((1.0 - momentum) * running_mean[c] + momentum * mean);
      running_var[c] = static_cast<float>((1.0 - momentum) * running_var[c] + momentum * squares / (m - 1.0));
    }
    const double scale = (weight ? static_cast<double>(weight[c]) : 1.0) * invstd;
    const double shift = bias ? static_cast<double>(bias[c]) : 0.0;
    for (int64_t i = 0; i < g.n; ++i) {
      float* out = st.out(y + plane(i), kOut);
      plane_affine(st.in(x + plane(i), kX), g.hw, mean, scale, shift,
                   residual ? st.in(residual + plane(i), kResidual) : nullptr, e, out);
      st.store(y + plane(i), out);
    }
  });
}

template <typename T>
void forward_eval(const BatchNormGeometry& g, const T* x, const float* weight, const float* bias,
                  const float* running_mean, const float* running_var, double eps, T* y, const T* residual,
                  BnActivation act) {
  const Epilogue e = epilogue_of(act);
  for_each_channel(g, [&](int64_t c) {
    Staging<T> st(g.hw);
    const double scale =
        (weight ? static_cast<double>(weight[c]) : 1.0) / std::sqrt(static_cast<double>(running_var[c]) + eps);
    const double shift = bias ? static_cast<double>(bias[c]) : 0.0;
    for (int64_t i = 0; i < g.n; ++i) {
      const int64_t at = (i * g.c + c) * g.hw;
      float* out = st.out(y + at, kOut);
      plane_affine(st.in(x + at, kX), g.hw, running_mean[c], scale, shift,
                   residual ? st.in(residual + at, kResidual) : nullptr, e, out);
      st.store(y + at, out);
    }
  });
}

template <typename T>
void backward(const BatchNormGeometry& g, bool training, const T* x, const T* dy, const float* weight,
              const float* mean, const float* invstd, T* dx, float* dweight, float* dbias, const BnActGradF32& act) {
  const double m = static_cast<double>(g.n * g.hw);
  const T* y = act.act == BnActivation::None ? nullptr : static_cast<const T*>(act.y);
  T* dresidual = static_cast<T*>(act.dresidual);
  const float hi = act.act == BnActivation::Relu6 ? std::nextafter(6.f, 0.f) : HUGE_VALF;
  for_each_channel(g, [&](int64_t c) {
    Staging<T> st(g.hw);
    auto plane = [&](int64_t i) { return (i * g.c + c) * g.hw; };
    // Plane i's operands; with_dres: the residual's gradient too (read first when accumulating).
    auto at = [&](int64_t i, bool with_dres) {
      const int64_t o = plane(i);
      float* dres = nullptr;
      if (with_dres && dresidual) {
        if (act.accumulate) st.in(dresidual + o, kOut);  // bf16: widened into the plane the kernel adds to
        dres = st.out(dresidual + o, kOut);
      }
      return GradPlane{st.in(x + o, kX), st.in(dy + o, kDy), y ? st.in(y + o, kY) : nullptr, dres, hi, act.accumulate};
    };
    const double mu = mean[c], is = invstd[c];
    double sum_dy = 0, sum_dy_xc = 0;  // Σ dy and Σ dy (x - mean): dbias, and dweight / invstd
    for (int64_t i = 0; i < g.n; ++i) {
      const GradPlane p = at(i, true);
      plane_grad_sums(p, g.hw, mu, &sum_dy, &sum_dy_xc);
      if (p.dres) st.store(dresidual + plane(i), p.dres);
    }
    if (dbias) dbias[c] = static_cast<float>(sum_dy);
    if (dweight) dweight[c] = static_cast<float>(sum_dy_xc * is);
    if (!dx) return;
    // dx = w is (dy - (Σdy + xhat Σ dy xhat) / m) in training, w is dy in evaluation; xhat = (x - mean) is.
    const double a = (weight ? static_cast<double>(weight[c]) : 1.0) * is;
    const double b = training ? -a * is * is * sum_dy_xc / m : 0.0;
    const double k = training ? -a * sum_dy / m : 0.0;
    for (int64_t i = 0; i < g.n; ++i) {
      float* out = st.out(dx + plane(i), kOut);
      plane_grad_input(at(i, false), g.hw, mu, a, b, k, out);
      st.store(dx + plane(i), out);
    }
  });
}

}  // namespace

bool batch_norm_f32_forward_train(const BatchNormGeometry& g, const void* x, const float* weight, const float* bias,
                                  double eps, double momentum, float* running_mean, float* running_var, void* y,
                                  float* save_mean, float* save_invstd, const void* residual, BnActivation act) {
  if (!applies(g)) return false;
  if (g.dtype == DType::BF16)
    forward_train(g, static_cast<const BFloat16*>(x), weight, bias, eps, momentum, running_mean, running_var,
                  static_cast<BFloat16*>(y), save_mean, save_invstd, static_cast<const BFloat16*>(residual), act);
  else
    forward_train(g, static_cast<const float*>(x), weight, bias, eps, momentum, running_mean, running_var,
                  static_cast<float*>(y), save_mean, save_invstd, static_cast<const float*>(residual), act);
  return true;
}

bool batch_norm_f32_forward_eval(const BatchNormGeometry& g, const void* x, const float* weight, const float* bias,
                                 const float* running_mean, const float* running_var, double eps, void* y,
                                 const void* residual, BnActivation act) {
  if (!applies(g)) return false;
  if (g.dtype == DType::BF16)
    forward_eval(g, static_cast<const BFloat16*>(x), weight, bias, running_mean, running_var, eps,
                 static_cast<BFloat16*>(y), static_cast<const BFloat16*>(residual), act);
  else
    forward_eval(g, static_cast<const float*>(x), weight, bias, running_mean, running_var, eps, static_cast<float*>(y),
                 static_cast<const float*>(residual), act);
  return true;
}

bool batch_norm_f32_backward(const BatchNormGeometry& g, bool training, const void* x, const void* dy,
                             const float* weight, const float* mean, const float* invstd, void* dx, float* dweight,
                             float* dbias, const BnActGradF32& act) {
  if (!applies(g)) return false;
  if (g.dtype == DType::BF16)
    backward(g, training, static_cast<const BFloat16*>(x), static_cast<const BFloat16*>(dy), weight, mean, invstd,
             static_cast<BFloat16*>(dx), dweight, dbias, act);
  else
    backward(g, training, static_cast<const float*>(x), static_cast<const float*>(dy), weight, mean, invstd,
             static_cast<float*>(dx), dweight, dbias, act);
  return true;
}

}  // namespace cpu
}  // namespace tandem
