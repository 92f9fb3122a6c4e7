// CPU indexing kernels (index_select, index_add, gather, scatter_add, one_hot) with bounds checks.
#include "kernels/cpu/cpu_backend.h"
#include "kernels/dispatch.h"

namespace tandem {
namespace cpu {

namespace {
inline void check_bound(int64_t v, int64_t n, const char* op, int64_t pos) {
  TD_CHECK_INDEX(v >= 0 && v < n, op, ": index ", v, " at position ", pos, " is out of range [0, ", n, ")");
}

// f(p, oi, i) for every element p = (oi * n_idx + j) * inner + i of [outer, n_idx, inner], in order (gather and
// scatter_add: one index per element).
template <typename F>
void for_each_indexed(int64_t outer, int64_t n_idx, int64_t inner, const F& f) {
  for (int64_t oi = 0; oi < outer; ++oi)
    for (int64_t j = 0; j < n_idx; ++j)
      for (int64_t i = 0; i < inner; ++i) f((oi * n_idx + j) * inner + i, oi, i);
}
}  // namespace

void CpuBackend::index_select(const IndexSelectArgs& args, const Stream&) {
  for (int64_t j = 0; j < args.n_idx; ++j) check_bound(args.idx[j], args.n_src, "index_select", j);
  TD_DISPATCH_BYTES(args.t, {
    const scalar_t* xp = static_cast<const scalar_t*>(args.x);
    scalar_t* o = static_cast<scalar_t*>(args.out);
    for (int64_t oi = 0; oi < args.outer; ++oi)
      for (int64_t j = 0; j < args.n_idx; ++j) {
        const scalar_t* src = xp + (oi * args.n_src + args.idx[j]) * args.inner;
        scalar_t* dst = o + (oi * args.n_idx + j) * args.inner;
        for (int64_t i = 0; i < args.inner; ++i) dst[i] = src[i];
      }
  });
}

void CpuBackend::index_add(const IndexAddArgs& args, const Stream&) {
  for (int64_t j = 0; j < args.n_idx; ++j) check_bound(args.idx[j], args.n_dst, "index_add", j);
  TD_DISPATCH_FLOAT(args.t, "index_add", {
    const scalar_t* sp = static_cast<const scalar_t*>(args.src);
    scalar_t* d = static_cast<scalar_t*>(args.dst);
    for (int64_t oi = 0; oi < args.outer; ++oi)
      for (int64_t j = 0; j < args.n_idx; ++j)
        for (int64_t i = 0; i < args.inner; ++i)
          d[(oi * args.n_dst + args.idx[j]) * args.inner + i] += sp[(oi * args.n_idx + j) * args.inner + i];
  });
}

void CpuBackend::gather(const GatherArgs& args, const Stream&) {
  int64_t total = args.outer * args.n_idx * args.inner;
  for (int64_t p = 0; p < total; ++p) check_bound(args.idx[p], args.n_src, "gather", p);
  TD_DISPATCH_BYTES(args.t, {
    const scalar_t* xp = static_cast<const scalar_t*>(args.x);
    scalar_t* o = static_cast<scalar_t*>(args.out);
    for_each_indexed(args.outer, args.n_idx, args.inner, [&](int64_t p, int64_t oi, int64_t i) {
      o[p] = xp[(oi * args.n_src + args.idx[p]) * args.inner + i];
    });
  });
}

void CpuBackend::scatter_add(const ScatterAddArgs& args, const Stream&) {
  int64_t total = args.outer * args.n_idx * args.inner;
  for (int64_t p = 0; p < total; ++p) check_bound(args.idx[p], args.n_dst, "scatter_add", p);
  TD_DISPATCH_FLOAT(args.t, "scatter_add", {
    const scalar_t* sp = static_cast<const scalar_t*>(args.src);
    scalar_t* d = static_cast<scalar_t*>(args.dst);
    for_each_indexed(args.outer, args.n_idx, args.inner, [&](int64_t p, int64_t oi, int64_t i) {
      d[(oi * args.n_dst + args.idx[p]) * args.inner + i] += sp[p];
    });
  });
}

void CpuBackend::one_hot(const OneHotArgs& args, const Stream&) {
  for (int64_t j = 0; j < args.n; ++j)
    TD_CHECK_INDEX(args.idx[j] >= 0 && args.idx[j] < args.classes, "one_hot: label ", args.idx[j], " at position ", j,
                   " is out of range [0, ", args.classes, ")");
  TD_DISPATCH_NUMERIC(args.t, "one_hot", {
    scalar_t* o = static_cast<scalar_t*>(args.out);
    for (int64_t j = 0; j < args.n; ++j)
      for (int64_t c = 0; c < args.classes; ++c)
        o[j * args.classes + c] = static_cast<scalar_t>(args.idx[j] == c ? 1 : 0);
  });
}

}  // namespace cpu
}  // namespace tandem
