// CPU fused SGD and Adam/AdamW steps (PyTorch's formulas, see runtime/nn_ops.h), computed in the
// parameters' dtype like the CUDA kernels.
#include <cmath>

#include "kernels/cpu/nn/cpu_nn_backend.h"
#include "kernels/dispatch.h"
#include "runtime/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;

template <typename T>
void sgd(int64_t count, void* const* params, const void* const* grads, void* const* bufs, const int64_t* numels,
         const SgdHyper& h) {
  const T lr = static_cast<T>(h.lr), mom = static_cast<T>(h.momentum), damp = static_cast<T>(1.0 - h.dampening),
          wd = static_cast<T>(h.weight_decay);
  for (int64_t t = 0; t < count; ++t) {
    T* p = static_cast<T*>(params[t]);
    const T* g = static_cast<const T*>(grads[t]);
    T* buf = h.momentum != 0 ? static_cast<T*>(bufs[t]) : nullptr;
    parallel_for(0, numels[t], kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) {
        T d = g[i];
        if (h.weight_decay != 0) d += wd * p[i];
        if (buf) {
          T b = h.first_step ? d : mom * buf[i] + damp * d;
          buf[i] = b;
          d = h.nesterov ? d + mom * b : b;
        }
        p[i] -= lr * d;
      }
    });
  }
}

template <typename T>
void adam(int64_t count, void* const* params, const void* const* grads, void* const* exp_avg,
          void* const* exp_avg_sq, const int64_t* numels, const AdamHyper& h) {
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

void CpuNNBackend::sgd_step(DType t, int64_t count, void* const* params, const void* const* grads,
                            void* const* momentum_buffers, const int64_t* numels, const SgdHyper& h,
                            const Stream&) {
  TD_DISPATCH_FLOAT(t, "sgd_step_", { sgd<scalar_t>(count, params, grads, momentum_buffers, numels, h); });
}

void CpuNNBackend::adam_step(DType t, int64_t count, void* const* params, const void* const* grads,
                             void* const* exp_avg, void* const* exp_avg_sq, const int64_t* numels, const AdamHyper& h,
                             const Stream&) {
  TD_DISPATCH_FLOAT(t, "adam_step_", { adam<scalar_t>(count, params, grads, exp_avg, exp_avg_sq, numels, h); });
}

}  // namespace cpu
}  // namespace tandem
