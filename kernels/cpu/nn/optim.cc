// CPU fused SGD and Adam/AdamW steps (PyTorch's formulas, see runtime/nn/nn_ops.h), computed in the
// parameters' dtype like the CUDA kernels.
#include <cmath>

#include "kernels/cpu/nn/cpu_nn_backend.h"
#include "kernels/dispatch.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;

struct SgdScalars {
  double lr, mom, damp, wd;
};

// One span of one parameter, the hyperparameters' branches resolved at compile time so that the loop
// vectorizes (the same operations per element, so the same results, as a scalar loop).
template <typename T, bool Decay, bool Momentum, bool First, bool Nesterov>
void sgd_span(T* __restrict p, const T* __restrict g, T* __restrict buf, int64_t lo, int64_t hi, const SgdScalars& s) {
  const T lr = static_cast<T>(s.lr), mom = static_cast<T>(s.mom), damp = static_cast<T>(s.damp),
          wd = static_cast<T>(s.wd);
  for (int64_t i = lo; i < hi; ++i) {
    T d = g[i];
    if (Decay) d += wd * p[i];
    if (Momentum) {
      T b = First ? d : mom * buf[i] + damp * d;
      buf[i] = b;
      d = Nesterov ? d + mom * b : b;
    }
    p[i] -= lr * d;
  }
}

template <typename T>
using SgdSpan = void (*)(T*, const T*, T*, int64_t, int64_t, const SgdScalars&);

// The sgd_span for the flags (decay, momentum, first step, nesterov).
template <typename T, bool... Chosen>
SgdSpan<T> pick_sgd_span(const bool (&flags)[4]) {
  if constexpr (sizeof...(Chosen) == 4) {
    return &sgd_span<T, Chosen...>;
  } else {
    return flags[sizeof...(Chosen)] ? pick_sgd_span<T, Chosen..., true>(flags)
                                    : pick_sgd_span<T, Chosen..., false>(flags);
  }
}

template <typename T>
void sgd(int64_t count, void* const* params, const void* const* grads, void* const* bufs, const int64_t* numels,
         const SgdHyper& h) {
  const SgdScalars s{h.lr, h.momentum, 1.0 - h.dampening, h.weight_decay};
  const bool flags[4] = {h.weight_decay != 0, h.momentum != 0, h.first_step, h.nesterov};
  const SgdSpan<T> span = pick_sgd_span<T>(flags);
  for (int64_t t = 0; t < count; ++t) {
    T* p = static_cast<T*>(params[t]);
    const T* g = static_cast<const T*>(grads[t]);
    T* buf = h.momentum != 0 ? static_cast<T*>(bufs[t]) : nullptr;
    parallel_for(0, numels[t], kGrain, [&](int64_t lo, int64_t hi) { span(p, g, buf, lo, hi, s); });
  }
}

template <typename T>
void adam(int64_t count, void* const* params, const void* const* grads, void* const* exp_avg, void* const* exp_avg_sq,
          const int64_t* numels, const AdamHyper& h) {
  const double step = static_cast<double>(h.step);
  const T b1 = static_cast<T>(h.beta1), b2 = static_cast<T>(h.beta2), one_b1 = static_cast<T>(1.0 - h.beta1),
          one_b2 = static_cast<T>(1.0 - h.beta2), eps = static_cast<T>(h.eps), wd = static_cast<T>(h.weight_decay);
  const T step_size = static_cast<T>(h.lr / (1.0 - std::pow(h.beta1, step)));
  const T bc2 = static_cast<T>(1.0 - std::pow(h.beta2, step));
  const T decay = static_cast<T>(1.0 - h.lr * h.weight_decay);
  const bool coupled = h.weight_decay != 0 && !h.decoupled_weight_decay;
  const bool decoupled = h.weight_decay != 0 && h.decoupled_weight_decay;
  for (int64_t t = 0; t < count; ++t) {
    T* p = static_cast<T*>(params[t]);
    const T* g = static_cast<const T*>(grads[t]);
    T* m = static_cast<T*>(exp_avg[t]);
    T* v = static_cast<T*>(exp_avg_sq[t]);
    parallel_for(0, numels[t], kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        T gi = g[i], pi = p[i];
        if (coupled) gi += wd * pi;
        if (decoupled) pi *= decay;
        T mi = b1 * m[i] + one_b1 * gi;
        T vi = b2 * v[i] + one_b2 * gi * gi;
        m[i] = mi;
        v[i] = vi;
        p[i] = pi - step_size * mi / (std::sqrt(vi / bc2) + eps);
      }
    });
  }
}
}  // namespace

void CpuNNBackend::sgd_step(const SgdStepArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT(args.t, "sgd_step_", {
    sgd<scalar_t>(args.count, args.params, args.grads, args.momentum_buffers, args.numels, args.h);
  });
}

void CpuNNBackend::adam_step(const AdamStepArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT(args.t, "adam_step_", {
    adam<scalar_t>(args.count, args.params, args.grads, args.exp_avg, args.exp_avg_sq, args.numels, args.h);
  });
}

}  // namespace cpu
}  // namespace tandem
