// CPU elementwise kernels: fill, copy/cast, unary ops and their derivatives, binary ops, where (the formulas
// are kernels/elementwise_ops.h's).
#include <type_traits>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/dispatch.h"
#include "kernels/elementwise_ops.h"
#include "kernels/strided.h"
#include "runtime/base/half.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {
constexpr int64_t kGrain = 1 << 15;

// Element conversions; f16/bf16 are held as uint16_t bit patterns and convert through float.
struct F16Tag {};
struct BF16Tag {};
template <typename S>
double load_as_double(const void* p, int64_t i) {
  return static_cast<double>(static_cast<const S*>(p)[i]);
}
template <>
double load_as_double<F16Tag>(const void* p, int64_t i) {
  return f16_to_float(static_cast<const uint16_t*>(p)[i]);
}
template <>
double load_as_double<BF16Tag>(const void* p, int64_t i) {
  return bf16_to_float(static_cast<const uint16_t*>(p)[i]);
}

template <typename D, typename S>
void copy_typed(const void* src, const StridedDesc& sd, void* dst, const StridedDesc& dd) {
  auto it = strided::make_iter<2>({&dd, &sd});
  strided::for_each_run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
    for (int64_t i = 0; i < n; ++i) {
      int64_t si = off[1] + i * st[1], di = off[0] + i * st[0];
      if constexpr (std::is_same<S, D>::value && std::is_empty<D>::value) {
        static_cast<uint16_t*>(dst)[di] = static_cast<const uint16_t*>(src)[si];  // f16 or bf16 bits as they are
      } else if constexpr (std::is_same<S, D>::value) {
        static_cast<D*>(dst)[di] = static_cast<const S*>(src)[si];
      } else if constexpr (std::is_same<D, F16Tag>::value) {
        static_cast<uint16_t*>(dst)[di] = float_to_f16(static_cast<float>(load_as_double<S>(src, si)));
      } else if constexpr (std::is_same<D, BF16Tag>::value) {
        static_cast<uint16_t*>(dst)[di] = float_to_bf16(static_cast<float>(load_as_double<S>(src, si)));
      } else if constexpr (std::is_same<S, F16Tag>::value || std::is_same<S, BF16Tag>::value) {
        static_cast<D*>(dst)[di] = static_cast<D>(load_as_double<S>(src, si));
      } else {
        static_cast<D*>(dst)[di] = static_cast<D>(static_cast<const S*>(src)[si]);
      }
    }
  });
}

template <typename D>
void copy_to(DType src_t, const void* src, const StridedDesc& sd, void* dst, const StridedDesc& dd) {
  switch (src_t) {
    case DType::F32: return copy_typed<D, float>(src, sd, dst, dd);
    case DType::F64: return copy_typed<D, double>(src, sd, dst, dd);
    case DType::F16: return copy_typed<D, F16Tag>(src, sd, dst, dd);
    case DType::BF16: return copy_typed<D, BF16Tag>(src, sd, dst, dd);
    case DType::I32: return copy_typed<D, int32_t>(src, sd, dst, dd);
    case DType::I64: return copy_typed<D, int64_t>(src, sd, dst, dd);
    case DType::U8: return copy_typed<D, uint8_t>(src, sd, dst, dd);
  }
}

}  // namespace

void CpuBackend::fill(const FillArgs& args, const Stream&) {
  auto fill_with = [&](auto v) {
    using V = decltype(v);
    auto it = strided::make_iter<1>({&args.d});
    strided::for_each_run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
      V* p = static_cast<V*>(args.dst) + off[0];
      for (int64_t i = 0; i < n; ++i) p[i * st[0]] = v;
    });
  };
  switch (args.t) {
    case DType::F32: fill_with(static_cast<float>(args.value)); break;
    case DType::F64: fill_with(args.value); break;
    case DType::F16: fill_with(float_to_f16(static_cast<float>(args.value))); break;
    case DType::BF16: fill_with(float_to_bf16(static_cast<float>(args.value))); break;
    case DType::I32: fill_with(static_cast<int32_t>(args.value)); break;
    case DType::I64: fill_with(static_cast<int64_t>(args.value)); break;
    case DType::U8: fill_with(static_cast<uint8_t>(args.value)); break;
  }
}

void CpuBackend::copy(const CopyArgs& args, const Stream&) {
  const StridedDesc &sd = args.src_d, &dd = args.dst_d;
  switch (args.dst_t) {
    case DType::F32: return copy_to<float>(args.src_t, args.src, sd, args.dst, dd);
    case DType::F64: return copy_to<double>(args.src_t, args.src, sd, args.dst, dd);
    case DType::F16: return copy_to<F16Tag>(args.src_t, args.src, sd, args.dst, dd);
    case DType::BF16: return copy_to<BF16Tag>(args.src_t, args.src, sd, args.dst, dd);
    case DType::I32: return copy_to<int32_t>(args.src_t, args.src, sd, args.dst, dd);
    case DType::I64: return copy_to<int64_t>(args.src_t, args.src, sd, args.dst, dd);
    case DType::U8: return copy_to<uint8_t>(args.src_t, args.src, sd, args.dst, dd);
  }
}

namespace {
// Runs body(F, s, i) for i in [0, n) over threads, with F the struct of op and s its scalars in T.
template <typename T, typename Body>
void for_each_unary(UnaryOp op, const UnaryParams& p, int64_t n, const Body& body) {
  const elementwise::Scalars<T> s = elementwise::scalars_of<T>(p);
  elementwise::visit_unary(op, [&](auto f) {
    parallel_for(0, n, kGrain, [&](int64_t lo, int64_t hi) {
      for (int64_t i = lo; i < hi; ++i) body(f, s, i);
    });
  });
}
}  // namespace

void CpuBackend::unary(const UnaryArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT(args.t, "unary op", {
    const scalar_t* xp = static_cast<const scalar_t*>(args.x);
    scalar_t* yp = static_cast<scalar_t*>(args.y);
    for_each_unary<scalar_t>(args.op, args.p, args.n,
                             [&](auto f, const auto& s, int64_t i) { yp[i] = f.value(xp[i], s); });
  });
}

void CpuBackend::unary_backward(const UnaryBackwardArgs& args, const Stream&) {
  TD_DISPATCH_FLOAT(args.t, "unary backward", {
    const scalar_t* xp = static_cast<const scalar_t*>(args.x);
    const scalar_t* yp = static_cast<const scalar_t*>(args.y);
    const scalar_t* gp = static_cast<const scalar_t*>(args.gy);
    scalar_t* out = static_cast<scalar_t*>(args.gx);
    for_each_unary<scalar_t>(args.op, args.p, args.n, [&](auto f, const auto& s, int64_t i) {
      out[i] = f.grad(xp ? xp[i] : scalar_t(0), yp ? yp[i] : scalar_t(0), gp[i], s);
    });
  });
}

void CpuBackend::binary(const BinaryArgs& args, const Stream&) {
  auto it = strided::make_iter<3>({&args.od, &args.ad, &args.bd});
  if (is_comparison(args.op)) {
    TD_DISPATCH_NUMERIC(args.t, "comparison", {
      const scalar_t* ap = static_cast<const scalar_t*>(args.a);
      const scalar_t* bp = static_cast<const scalar_t*>(args.b);
      uint8_t* op_ = static_cast<uint8_t*>(args.out);
      strided::for_each_run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
        for (int64_t i = 0; i < n; ++i)
          op_[off[0] + i * st[0]] = elementwise::compare(args.op, ap[off[1] + i * st[1]], bp[off[2] + i * st[2]]);
      });
    });
    return;
  }
  TD_DISPATCH_FLOAT(args.t, "binary op", {
    const scalar_t* ap = static_cast<const scalar_t*>(args.a);
    const scalar_t* bp = static_cast<const scalar_t*>(args.b);
    scalar_t* o = static_cast<scalar_t*>(args.out);
    elementwise::visit_binary(args.op, [&](auto f) {
      using F = decltype(f);
      if (it.ndim == 1 && it.strides[0][0] == 1) {
        // One flat run (the common case): split it over threads.
        int64_t sa = it.strides[1][0], sb = it.strides[2][0];
        parallel_for(0, it.shape[0], kGrain, [&](int64_t lo, int64_t hi) {
          for (int64_t i = lo; i < hi; ++i) o[i] = F::value(ap[i * sa], bp[i * sb]);
        });
      } else {
        strided::for_each_run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
          for (int64_t i = 0; i < n; ++i)
            o[off[0] + i * st[0]] = F::value(ap[off[1] + i * st[1]], bp[off[2] + i * st[2]]);
        });
      }
    });
  });
}

void CpuBackend::where(const WhereArgs& args, const Stream&) {
  auto it = strided::make_iter<4>({&args.od, &args.cd, &args.ad, &args.bd});
  const uint8_t* c = static_cast<const uint8_t*>(args.cond);
  TD_DISPATCH_BYTES(args.t, {
    const scalar_t* ap = static_cast<const scalar_t*>(args.a);
    const scalar_t* bp = static_cast<const scalar_t*>(args.b);
    scalar_t* o = static_cast<scalar_t*>(args.out);
    strided::for_each_run(it, [&](const int64_t* off, int64_t n, const int64_t* st) {
      for (int64_t i = 0; i < n; ++i)
        o[off[0] + i * st[0]] = c[off[1] + i * st[1]] ? ap[off[2] + i * st[2]] : bp[off[3] + i * st[3]];
    });
  });
}

}  // namespace cpu
}  // namespace tandem
