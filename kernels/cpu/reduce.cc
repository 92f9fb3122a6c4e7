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
  ReduceOp op = args.op;
  DType t = args.t;
  const void* x = args.x;
  int64_t outer = args.outer, r = args.r, inner = args.inner;
  void* out = args.out;
  int64_t* indices = args.indices;
  TD_DISPATCH_FLOAT(t, "reduction", {
    const scalar_t* xp = static_cast<const scalar_t*>(x);
    scalar_t* o = static_cast<scalar_t*>(out);
    int64_t grain = std::max<int64_t>(1, (1 << 16) / std::max<int64_t>(r * inner, 1));
    parallel_for(0, outer, grain, [&](int64_t lo, int64_t hi) {
      std::vector<double> acc(static_cast<size_t>(inner));
      std::vector<int64_t> arg(static_cast<size_t>(inner));
      for (int64_t oi = lo; oi < hi; ++oi) {
        const scalar_t* base = xp + oi * r * inner;
        if (op == ReduceOp::Sum) {
          std::fill(acc.begin(), acc.end(), 0.0);
          for (int64_t j = 0; j < r; ++j)
            for (int64_t i = 0; i < inner; ++i) acc[i] += static_cast<double>(base[j * inner + i]);
          for (int64_t i = 0; i < inner; ++i) o[oi * inner + i] = static_cast<scalar_t>(acc[i]);
        } else {
          bool is_max = op == ReduceOp::Max;
          for (int64_t i = 0; i < inner; ++i) {
            acc[i] = static_cast<double>(base[i]);
            arg[i] = 0;
          }
          for (int64_t j = 1; j < r; ++j)
            for (int64_t i = 0; i < inner; ++i) {
              double v = static_cast<double>(base[j * inner + i]);
              if (std::isnan(acc[i])) continue;  // the first NaN wins
              if (std::isnan(v) || (is_max ? v > acc[i] : v < acc[i])) {
                acc[i] = v;
                arg[i] = j;
              }
            }
          for (int64_t i = 0; i < inner; ++i) {
            o[oi * inner + i] = static_cast<scalar_t>(acc[i]);
            if (indices) indices[oi * inner + i] = arg[i];
          }
        }
      }
    });
  });
}

void CpuBackend::softmax(const SoftmaxArgs& args, const Stream&) {
  bool log = args.log;
  DType t = args.t;
  const void* x = args.x;
  void* y = args.y;
  int64_t outer = args.outer, n = args.n, inner = args.inner;
  TD_DISPATCH_FLOAT(t, "softmax", {
    const scalar_t* xp = static_cast<const scalar_t*>(x);
    scalar_t* yp = static_cast<scalar_t*>(y);
    parallel_for(0, outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        int64_t oi = c / inner, ii = c % inner;
        const scalar_t* in = xp + oi * n * inner + ii;
        scalar_t* o = yp + oi * n * inner + ii;
        double mx = -std::numeric_limits<double>::infinity();
        for (int64_t j = 0; j < n; ++j) mx = std::max(mx, static_cast<double>(in[j * inner]));
        double s = 0;
        for (int64_t j = 0; j < n; ++j) s += std::exp(static_cast<double>(in[j * inner]) - mx);
        if (log) {
          double lse = mx + std::log(s);
          for (int64_t j = 0; j < n; ++j)
            o[j * inner] = static_cast<scalar_t>(static_cast<double>(in[j * inner]) - lse);
        } else {
          for (int64_t j = 0; j < n; ++j)
            o[j * inner] = static_cast<scalar_t>(std::exp(static_cast<double>(in[j * inner]) - mx) / s);
        }
      }
    });
  });
}

void CpuBackend::softmax_backward(const SoftmaxBackwardArgs& args, const Stream&) {
  bool log = args.log;
  DType t = args.t;
  const void* y = args.y;
  const void* gy = args.gy;
  void* gx = args.gx;
  int64_t outer = args.outer, n = args.n, inner = args.inner;
  TD_DISPATCH_FLOAT(t, "softmax backward", {
    const scalar_t* yp = static_cast<const scalar_t*>(y);
    const scalar_t* gp = static_cast<const scalar_t*>(gy);
    scalar_t* out = static_cast<scalar_t*>(gx);
    parallel_for(0, outer * inner, std::max<int64_t>(1, 4096 / std::max<int64_t>(n, 1)), [&](int64_t lo, int64_t hi) {
      for (int64_t c = lo; c < hi; ++c) {
        int64_t base = (c / inner) * n * inner + c % inner;
        double s = 0;
        if (log) {
          // gx = gy - softmax * sum(gy)
          for (int64_t j = 0; j < n; ++j) s += static_cast<double>(gp[base + j * inner]);
          for (int64_t j = 0; j < n; ++j) {
            int64_t k = base + j * inner;
            out[k] = static_cast<scalar_t>(static_cast<double>(gp[k]) - std::exp(static_cast<double>(yp[k])) * s);
          }
        } else {
          // gx = y * (gy - sum(gy * y))
          for (int64_t j = 0; j < n; ++j) s += static_cast<double>(gp[base + j * inner]) * yp[base + j * inner];
          for (int64_t j = 0; j < n; ++j) {
            int64_t k = base + j * inner;
            out[k] = static_cast<scalar_t>(static_cast<double>(yp[k]) * (static_cast<double>(gp[k]) - s));
          }
        }
      }
    });
  });
}

}  // namespace cpu
}  // namespace tandem
