// CPU reductions and softmax; sums accumulate in double, in a fixed order.
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/dispatch.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

void CpuBackend::reduce(const ReduceArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT(args.t, "reduction", {
    const scalar_t* xp = static_cast<const scalar_t*>(args.x);
    scalar_t* o = static_cast<scalar_t*>(args.out);
    int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(args.r * args.inner, 1));
    parallel_for(0, args.outer, grain, [&](int64_t lo, int64_t hi) {
      std::vector<double> acc(static_cast<size_t>(args.inner));
      std::vector<int64_t> arg(static_cast<size_t>(args.inner));
      for (int64_t oi = lo; oi < hi; ++oi) {
        const scalar_t* base = xp + oi * args.r * args.inner;
        if (args.op == ReduceOp::Sum) {
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t j = 0; j < args.r; ++j)
            for (int64_t i = 0; i < args.inner; ++i) acc[i] += static_cast<double>(base[j * args.inner + i]);
          for (int64_t i = 0; i < args.inner; ++i) o[oi * args.inner + i] = static_cast<scalar_t>(acc[i]);
        } else {
          bool is_max = args.op == ReduceOp::Max;
          for (int64_t i = 0; i < args.inner; ++i) {
            acc[i] = static_cast<double>(base[i]);
            arg[i] = 0;
          }
          for (int64_t j = 1; j < args.r; ++j)
            for (int64_t i = 0; i < args.inner; ++i) {
              double v = static_cast<double>(base[j * args.inner + i]);
              if (std::isnan(acc[i])) continue;  // the first NaN wins
              if (std::isnan(v) || (is_max ? v > acc[i] : v < acc[i])) {
                acc[i] = v;
                arg[i] = j;
              }
            }
          for (int64_t i = 0; i < args.inner; ++i) {
            o[oi * args.inner + i] = static_cast<scalar_t>(acc[i]);
            if (args.indices) args.indices[oi * args.inner + i] = arg[i];
          }
        }
      }
    });
  });
}

void CpuBackend::softmax(const SoftmaxArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT(args.t, "softmax", {
    const scalar_t* xp = static_cast<const scalar_t*>(args.x);
    scalar_t* yp = static_cast<scalar_t*>(args.y);
    parallel_for(0, args.outer * args.inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(args.n, 1)),
                 [&](int64_t lo, int64_t hi) {
                   for (int64_t c = lo; c < hi; ++c) {
                     int64_t oi = c / args.inner, ii = c % args.inner;
                     const scalar_t* in = xp + oi * args.n * args.inner + ii;
                     scalar_t* o = yp + oi * args.n * args.inner + ii;
                     double mx = -std::numeric_limits<double>::infinity();
                     for (int64_t j = 0; j < args.n; ++j) mx = std::max(mx, static_cast<double>(in[j * args.inner]));
                     double s = 0;
                     for (int64_t j = 0; j < args.n; ++j) s += std::exp(static_cast<double>(in[j * args.inner]) - mx);
                     if (args.log) {
                       double lse = mx + std::log(s);
                       for (int64_t j = 0; j < args.n; ++j)
                         o[j * args.inner] = static_cast<scalar_t>(static_cast<double>(in[j * args.inner]) - lse);
                     } else {
                       for (int64_t j = 0; j < args.n; ++j)
                         o[j * args.inner] =
                             static_cast<scalar_t>(std::exp(static_cast<double>(in[j * args.inner]) - mx) / s);
                     }
                   }
                 });
  });
}

void CpuBackend::softmax_backward(const SoftmaxBackwardArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT(args.t, "softmax backward", {
    const scalar_t* yp = static_cast<const scalar_t*>(args.y);
    const scalar_t* gp = static_cast<const scalar_t*>(args.gy);
    scalar_t* out = static_cast<scalar_t*>(args.gx);
    parallel_for(
        0, args.outer * args.inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(args.n, 1)),
        [&](int64_t lo, int64_t hi) {
          for (int64_t c = lo; c < hi; ++c) {
            int64_t base = (c / args.inner) * args.n * args.inner + c % args.inner;
            double s = 0;
            if (args.log) {
              // gx = gy - softmax * sum(gy)
              for (int64_t j = 0; j < args.n; ++j) s += static_cast<double>(gp[base + j * args.inner]);
              for (int64_t j = 0; j < args.n; ++j) {
                int64_t k = base + j * args.inner;
                out[k] = static_cast<scalar_t>(static_cast<double>(gp[k]) - std::exp(static_cast<double>(yp[k])) * s);
              }
            } else {
              // gx = y * (gy - sum(gy * y))
              for (int64_t j = 0; j < args.n; ++j)
                s += static_cast<double>(gp[base + j * args.inner]) * yp[base + j * args.inner];
              for (int64_t j = 0; j < args.n; ++j) {
                int64_t k = base + j * args.inner;
                out[k] = static_cast<scalar_t>(static_cast<double>(yp[k]) * (static_cast<double>(gp[k]) - s));
              }
            }
          }
        });
  });
}

}  // namespace cpu
}  // namespace tandem
