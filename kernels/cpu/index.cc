// CPU indexing kernels (index_select, index_add, gather, scatter_add, one_hot) with bounds checks.
#include "kernels/cpu/cpu_backend.h"
#include "kernels/dispatch.h"

namespace tandem {
namespace cpu {

namespace {
inline void check_bound(int64_t v, int64_t n, const char* op, int64_t pos) {
  TD_CHECK_INDEX(v >= 0 && v < n, op, ": index ", v, " at position ", pos, " is out of range [0, ", n, ")");
}
}  // namespace

void CpuBackend::index_select(const IndexSelectArgs& args, const Stream&) {
  DType t = args.t;
  const void* x = args.x;
  int64_t outer = args.outer, n_src = args.n_src, inner = args.inner;
  const int64_t* idx = args.idx;
  int64_t n_idx = args.n_idx;
  void* out = args.out;
  for (int64_t j = 0; j < n_idx; ++j) check_bound(idx[j], n_src, "index_select", j);
  TD_DISPATCH_BYTES(t, {
    const scalar_t* xp = static_cast<const scalar_t*>(x);
    scalar_t* o = static_cast<scalar_t*>(out);
    for (int64_t oi = 0; oi < outer; ++oi)
      for (int64_t j = 0; j < n_idx; ++j) {
        const scalar_t* src = xp + (oi * n_src + idx[j]) * inner;
        scalar_t* dst = o + (oi * n_idx + j) * inner;
        for (int64_t i = 0; i < inner; ++i) dst[i] = src[i];
      }
  });
}

void CpuBackend::index_add(const IndexAddArgs& args, const Stream&) {
  DType t = args.t;
  const void* src = args.src;
  int64_t outer = args.outer, n_idx = args.n_idx, inner = args.inner;
  const int64_t* idx = args.idx;
  int64_t n_dst = args.n_dst;
  void* dst = args.dst;
  for (int64_t j = 0; j < n_idx; ++j) check_bound(idx[j], n_dst, "index_add", j);
  TD_DISPATCH_FLOAT(t, "index_add", {
    const scalar_t* sp = static_cast<const scalar_t*>(src);
    scalar_t* d = static_cast<scalar_t*>(dst);
    for (int64_t oi = 0; oi < outer; ++oi)
      for (int64_t j = 0; j < n_idx; ++j)
        for (int64_t i = 0; i < inner; ++i) d[(oi * n_dst + idx[j]) * inner + i] += sp[(oi * n_idx + j) * inner + i];
  });
}

void CpuBackend::gather(const GatherArgs& args, const Stream&) {
  DType t = args.t;
  const void* x = args.x;
  int64_t outer = args.outer, n_src = args.n_src, inner = args.inner;
  const int64_t* idx = args.idx;
  int64_t n_idx = args.n_idx;
  void* out = args.out;
  int64_t total = outer * n_idx * inner;
  for (int64_t p = 0; p < total; ++p) check_bound(idx[p], n_src, "gather", p);
  TD_DISPATCH_BYTES(t, {
    const scalar_t* xp = static_cast<const scalar_t*>(x);
    scalar_t* o = static_cast<scalar_t*>(out);
    for (int64_t oi = 0; oi < outer; ++oi)
      for (int64_t j = 0; j < n_idx; ++j)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t p = (oi * n_idx + j) * inner + i;
          o[p] = xp[(oi * n_src + idx[p]) * inner + i];
        }
  });
}

void CpuBackend::scatter_add(const ScatterAddArgs& args, const Stream&) {
  DType t = args.t;
  const void* src = args.src;
  int64_t outer = args.outer, n_idx = args.n_idx, inner = args.inner;
  const int64_t* idx = args.idx;
  int64_t n_dst = args.n_dst;
  void* dst = args.dst;
  int64_t total = outer * n_idx * inner;
  for (int64_t p = 0; p < total; ++p) check_bound(idx[p], n_dst, "scatter_add", p);
  TD_DISPATCH_FLOAT(t, "scatter_add", {
    const scalar_t* sp = static_cast<const scalar_t*>(src);
    scalar_t* d = static_cast<scalar_t*>(dst);
    for (int64_t oi = 0; oi < outer; ++oi)
      for (int64_t j = 0; j < n_idx; ++j)
        for (int64_t i = 0; i < inner; ++i) {
          int64_t p = (oi * n_idx + j) * inner + i;
          d[(oi * n_dst + idx[p]) * inner + i] += sp[p];
        }
  });
}

void CpuBackend::one_hot(const OneHotArgs& args, const Stream&) {
  const int64_t* idx = args.idx;
  int64_t n = args.n, classes = args.classes;
  DType t = args.t;
  void* out = args.out;
  for (int64_t j = 0; j < n; ++j)
    TD_CHECK_INDEX(idx[j] >= 0 && idx[j] < classes, "one_hot: label ", idx[j], " at position ", j,
                   " is out of range [0, ", classes, ")");
  TD_DISPATCH_NUMERIC(t, "one_hot", {
    scalar_t* o = static_cast<scalar_t*>(out);
    for (int64_t j = 0; j < n; ++j)
      for (int64_t c = 0; c < classes; ++c) o[j * classes + c] = static_cast<scalar_t>(idx[j] == c ? 1 : 0);
  });
}

}  // namespace cpu
}  // namespace tandem
