// CUDA reductions over the middle dim of a contiguous [outer, r, inner] tensor.
// Deterministic: each output is combined in an order fixed by the shape alone (per-thread runs in
// increasing position, then fixed trees), never with atomics. When outer * inner cannot fill the GPU the
// r dim is split into segments whose partial results go to workspace memory, then a second pass combines
// them. Sums accumulate in double; Max/Min carry the position of the extreme (the first NaN wins, ties go to
// the lowest position), which makes their combination order-free and equal to the CPU's sequential scan.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/dispatch.h"
#include "runtime/base/cuda_check.h"

namespace tandem {
namespace cuda {

namespace {
template <typename T_>
struct SumReducer {
  using T = T_;
  using Acc = double;
  __device__ __forceinline__ Acc identity() const { return 0.0; }
  __device__ __forceinline__ Acc combine(Acc a, Acc b) const { return a + b; }
  // Raw values at positions j0, j0 + 1, ..., all after those already in a.
  template <int N>
  __device__ __forceinline__ void fold(Acc& a, const T (&v)[N], int64_t) const {
#pragma unroll
    for (int e = 0; e < N; ++e) a += static_cast<double>(v[e]);
  }
  __device__ __forceinline__ void write(Acc a, T* out, int64_t*, int64_t pos) const { out[pos] = static_cast<T>(a); }
};

template <typename T>
struct ArgAcc {
  T v;
  int64_t i;  // position of v along r; negative while empty
};

template <typename T>
__device__ __forceinline__ ArgAcc<T> shfl_xor(const ArgAcc<T>& a, int mask, int width) {
  return {cuda::shfl_xor(a.v, mask, width), cuda::shfl_xor(a.i, mask, width)};
}

template <typename T_, bool kMax>
struct ArgReducer {
  using T = T_;
  using Acc = ArgAcc<T>;
  __device__ __forceinline__ Acc identity() const { return {T(0), -1}; }
  // Whether b, at a later position than a, replaces it: the first NaN stays, else a strictly better b wins
  // (a NaN b included: !(b <= a) holds for it).
  __device__ __forceinline__ static bool later_wins(T b, T a) { return a == a && !(kMax ? b <= a : b >= a); }
  __device__ __forceinline__ Acc combine(const Acc& a, const Acc& b) const {
    if (a.i < 0) return b;
    if (b.i < 0) return a;
    const bool a_nan = a.v != a.v, b_nan = b.v != b.v;
    if (a_nan || b_nan) {
      if (a_nan && b_nan) return a.i < b.i ? a : b;
      return a_nan ? a : b;
    }
    if (a.v == b.v) return a.i < b.i ? a : b;
    return (kMax ? a.v > b.v : a.v < b.v) ? a : b;
  }
  // The scan's rule (later_wins) within the N values, then once against a: a few compares and selects per
  // value instead of combine's position and NaN tests.
  template <int N>
  __device__ __forceinline__ void fold(Acc& a, const T (&v)[N], int64_t j0) const {
    T best = v[0];
    int at = 0;
#pragma unroll
    for (int e = 1; e < N; ++e)
      if (later_wins(v[e], best)) {
        best = v[e];
        at = e;
      }
    if (a.i < 0 || later_wins(best, a.v)) a = {best, j0 + at};
  }
  __device__ __forceinline__ void write(const Acc& a, T* out, int64_t* idx, int64_t pos) const {
    out[pos] = a.v;
    if (idx != nullptr) idx[pos] = a.i;
  }
};

// Folds N consecutive inputs starting at position j0 into acc, in increasing position: raw values by the
// reducer's fold, partial results (In == Acc) by combine.
template <typename R, typename In, int N>
__device__ __forceinline__ void fold_in(const R& red, typename R::Acc& acc, const In (&v)[N], int64_t j0) {
  if constexpr (std::is_same<In, typename R::Acc>::value) {
#pragma unroll
    for (int e = 0; e < N; ++e) acc = red.combine(acc, v[e]);
  } else {
    red.fold(acc, v, j0);
  }
}

// inner == 1: groups of G lanes (G a power of two <= kThreads) each reduce one segment of one row. Lane l
// folds the V-element chunks l, l + G, l + 2G, ... of the segment, each in increasing position (the same
// order whether or not the chunks are read as vectors, so the result does not depend on alignment), then
// the group is combined by group_reduce. G is planned so that a lane folds at least 8 chunks: the group's
// combine is paid once per 8 chunks, and rows up to 32 * 8 * V elements need no barrier. Work items
// are (row, segment); the 64-bit division that splits an item is only done when r is split.
template <typename R, typename In, int V>
__global__ void __launch_bounds__(kThreads)
    reduce_rows_kernel(R red, const In* x, int64_t rows, int64_t r, int64_t seg_len, int64_t nseg, int G, bool vec,
                       typename R::Acc* partial, typename R::T* out, int64_t* idx) {
  using Acc = typename R::Acc;
  __shared__ Acc smem[kThreads / 32];
  const int groups = blockDim.x / G, group = threadIdx.x / G, lane = threadIdx.x % G;
  const int64_t items = rows * nseg;
  const auto combine = [&red](const Acc& a, const Acc& b) { return red.combine(a, b); };
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups; base < items;
       base += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t item = base + group;
    Acc acc = red.identity();
    if (item < items) {
      int64_t row = item, seg = 0;
      if (nseg > 1) {
        row = item / nseg;
        seg = item - row * nseg;
      }
      const int64_t begin = seg * seg_len, len = min(r, begin + seg_len) - begin;
      const In* p = x + row * r + begin;
      const int64_t nchunks = (len + V - 1) / V;
      int64_t c = lane;
      if (V > 1 && vec) {
        // Four 16-byte loads in flight per step.
        for (; c + 3 * G < nchunks; c += 4 * G) {
          Vec<In, V> t[4];
#pragma unroll
          for (int u = 0; u < 4; ++u) t[u] = load_vec<In, V>(p + (c + u * G) * V);
#pragma unroll
          for (int u = 0; u < 4; ++u) fold_in<R, In, V>(red, acc, t[u].v, begin + (c + u * G) * V);
        }
        for (; c < nchunks; c += G) {
          Vec<In, V> t = load_vec<In, V>(p + c * V);
          fold_in<R, In, V>(red, acc, t.v, begin + c * V);
        }
      } else {
#pragma unroll 2
        for (; c < nchunks; c += G) {
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const int64_t j = c * V + e;
            if (j < len) {
              const In v[1] = {p[j]};
              fold_in<R, In, 1>(red, acc, v, begin + j);
            }
          }
        }
      }
    }
    acc = group_reduce(acc, G, combine, smem);
    if (item < items && lane == 0) {
      if (nseg > 1)
        partial[item] = acc;
      else
        red.write(acc, out, idx, item);
    }
  }
}

// inner > 1: blockDim = (TX, TY). Thread x owns V consecutive inner positions of one column block of the
// flattened (outer, inner / V) columns; the TY threads of a column split the segment's rows (ty, ty + TY,
// ...), then combine through shared memory in a fixed tree. Work items are (column block, segment). A
// warp spans at most 32 vectors of one row (512 contiguous bytes of f32), so narrow tensors still get TY
// row lanes per column and fewer, longer segments (less partial traffic, one second pass).
template <typename R, typename In, int V>
__global__ void __launch_bounds__(kThreads)
    reduce_cols_kernel(R red, const In* x, int64_t outer, int64_t r, int64_t inner, int64_t seg_len, int64_t nseg,
                       typename R::Acc* partial, typename R::T* out, int64_t* idx) {
  using Acc = typename R::Acc;
  __shared__ Acc smem[kThreads * V];
  const int TX = blockDim.x, TY = blockDim.y, tx = threadIdx.x, ty = threadIdx.y;
  const int64_t nv = inner / V, columns = outer * nv;
  const int64_t items = (columns + TX - 1) / TX * nseg;
  for (int64_t item = blockIdx.x; item < items; item += gridDim.x) {
    int64_t block = item, seg = 0;
    if (nseg > 1) {
      block = item / nseg;
      seg = item - block * nseg;
    }
    const int64_t w = block * TX + tx;
    int64_t o = 0, iv = w;
    if (outer > 1) {
      o = w / nv;
      iv = w - o * nv;
    }
    Acc acc[V];
#pragma unroll
    for (int e = 0; e < V; ++e) acc[e] = red.identity();
    if (w < columns) {
      const int64_t begin = seg * seg_len, end = min(r, begin + seg_len);
      const In* p = x + o * r * inner + iv * V;
      int64_t j = begin + ty;
      for (; j + 3 * TY < end; j += 4 * TY) {
        Vec<In, V> t[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) t[u] = load_vec<In, V>(p + (j + u * TY) * inner);
#pragma unroll
        for (int u = 0; u < 4; ++u)
#pragma unroll
          for (int e = 0; e < V; ++e) {
            const In v[1] = {t[u].v[e]};
            fold_in<R, In, 1>(red, acc[e], v, j + u * TY);
          }
      }
      for (; j < end; j += TY) {
        Vec<In, V> t = load_vec<In, V>(p + j * inner);
#pragma unroll
        for (int e = 0; e < V; ++e) {
          const In v[1] = {t.v[e]};
          fold_in<R, In, 1>(red, acc[e], v, j);
        }
      }
    }
    if (TY > 1) {
      Acc* mine = smem + (ty * TX + tx) * V;
#pragma unroll
      for (int e = 0; e < V; ++e) mine[e] = acc[e];
      __syncthreads();
      for (int h = TY / 2; h > 0; h >>= 1) {
        if (ty < h) {
          const Acc* other = smem + ((ty + h) * TX + tx) * V;
#pragma unroll
          for (int e = 0; e < V; ++e) {
            acc[e] = red.combine(acc[e], other[e]);
            mine[e] = acc[e];
          }
        }
        __syncthreads();
      }
    }
    if (ty == 0 && w < columns) {
#pragma unroll
      for (int e = 0; e < V; ++e) {
        if (nseg > 1)
          partial[(o * nseg + seg) * inner + iv * V + e] = acc[e];
        else
          red.write(acc[e], out, idx, o * inner + iv * V + e);
      }
    }
  }
}

// Threads that keep the GPU's memory system busy: about what an A100/H100 holds resident at once. The
// column kernel holds V accumulators and four vectors in flight per thread, which leaves room for half as
// many resident threads: it plans for half, so that its blocks run in one wave.
constexpr int64_t kTargetThreads = int64_t{1} << 18;
constexpr int64_t kTargetColumnThreads = kTargetThreads / 2;

int64_t pow2_floor(int64_t v) {
  int64_t p = 1;
  while (p * 2 <= v) p *= 2;
  return p;
}
int64_t pow2_ceil(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// Splits r into segments when `threads` threads alone would leave the GPU idle (fewer than `target`) and
// each would run long (more than 64 units of `per_thread_unit` elements); every segment then keeps its
// threads busy for at least 32 units. Returns the segment length (a multiple of `unit`); the segment count is
// ceil(r / result), which is below r / 64, so passes over partial results shrink r quickly.
int64_t segment_length(int64_t r, int64_t threads, int64_t per_thread_unit, int64_t unit, int64_t target) {
  const int64_t whole = ceil_div(r, unit) * unit;
  if (threads >= target || r <= per_thread_unit * 64) return std::max<int64_t>(whole, unit);
  const int64_t nseg = std::min(ceil_div(target, threads), ceil_div(r, per_thread_unit * 32));
  return ceil_div(ceil_div(r, nseg), unit) * unit;
}

// One pass over [outer, r, inner] of `In` (raw values or partials); when it splits r it writes partials to
// workspace memory and reduces those with another pass. The split and the per-thread row assignment are
// planned from the shape and `plan_v` (the vector width raw inputs of this dtype could use) only, never
// from the pointer's alignment, so that an output's summation order is a function of the shape.
template <typename R, typename In, int V>
void reduce_pass(const R& red, const In* x, int64_t outer, int64_t r, int64_t inner, int plan_v, bool vec,
                 typename R::T* out, int64_t* idx, const Stream& s, const LaunchScope& ls) {
  using Acc = typename R::Acc;
  int64_t seg_len, nseg;
  Storage partials;
  if (inner == 1) {
    const int64_t chunks = ceil_div(r, V);
    const int G = static_cast<int>(std::min<int64_t>(kThreads, pow2_floor(std::max<int64_t>(1, chunks / 8))));
    seg_len = segment_length(r, outer * G, static_cast<int64_t>(G) * V, V, kTargetThreads);
    nseg = std::max<int64_t>(1, ceil_div(r, seg_len));
    if (nseg > 1) partials = workspace(static_cast<size_t>(outer * nseg) * sizeof(Acc), s);
    const int64_t blocks = ceil_div(outer * nseg, kThreads / G);
    launch_kernel(TD_KERNEL(reduce_rows_kernel<R, In, V>), grid_for(blocks, ls.device()), kThreads, 0, ls.stream(), red,
                  x, outer, r, seg_len, nseg, G, vec, static_cast<Acc*>(partials.data()), out, idx);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "reduce_rows_kernel");
  } else {
    const int64_t plan_columns = inner % plan_v == 0 ? outer * (inner / plan_v) : outer * inner;
    const int64_t plan_tx = std::min<int64_t>(32, pow2_ceil(plan_columns));
    const int64_t plan_threads = ceil_div(plan_columns, plan_tx) * plan_tx;
    // Row lanes per column while each keeps >= 8 rows: a short r (a second pass over partial results) then
    // has all its loads in flight in one or two steps instead of a serial run.
    int TY = 1;
    while (plan_tx * TY < kThreads && plan_threads * TY < kTargetColumnThreads && r >= 16 * TY) TY *= 2;
    seg_len = segment_length(r, plan_threads * TY, TY, 1, kTargetColumnThreads);
    nseg = std::max<int64_t>(1, ceil_div(r, seg_len));
    if (nseg > 1) partials = workspace(static_cast<size_t>(outer * nseg * inner) * sizeof(Acc), s);
    const int64_t columns = outer * (inner / V);
    const int TX = static_cast<int>(std::min<int64_t>(kThreads / TY, pow2_ceil(columns)));
    const int64_t blocks = ceil_div(columns, TX) * nseg;
    launch_kernel(TD_KERNEL(reduce_cols_kernel<R, In, V>), grid_for(blocks, ls.device()), dim3(TX, TY), 0, ls.stream(),
                  red, x, outer, r, inner, seg_len, nseg, static_cast<Acc*>(partials.data()), out, idx);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "reduce_cols_kernel");
  }
  if (nseg > 1)
    reduce_pass<R, Acc, 1>(red, static_cast<const Acc*>(partials.data()), outer, nseg, inner, 1, false, out, idx, s,
                           ls);
}

template <typename R>
void run_reduce(const R& red, const void* x, int64_t outer, int64_t r, int64_t inner, void* out, int64_t* idx,
                const Stream& s, const LaunchScope& ls) {
  using T = typename R::T;
  constexpr int V = vec_width<T>();
  const T* xp = static_cast<const T*>(x);
  T* op = static_cast<T*>(out);
  const bool aligned = is_aligned(x, 16);
  if (inner == 1)
    reduce_pass<R, T, V>(red, xp, outer, r, 1, V, aligned && r % V == 0, op, idx, s, ls);
  else if (aligned && inner % V == 0)
    reduce_pass<R, T, V>(red, xp, outer, r, inner, V, true, op, idx, s, ls);
  else
    reduce_pass<R, T, 1>(red, xp, outer, r, inner, V, false, op, idx, s, ls);
}
}  // namespace

void CudaBackend::reduce(const ReduceArgs& args, const Stream& s) {
  if (args.outer * args.inner == 0) return;
  TD_CHECK_SHAPE(args.r > 0 || args.op == ReduceOp::Sum, "max/min over an empty dimension");
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(args.t, "reduction", {
    if (args.op == ReduceOp::Sum)
      run_reduce(SumReducer<scalar_t>{}, args.x, args.outer, args.r, args.inner, args.out, nullptr, s, ls);
    else if (args.op == ReduceOp::Max)
      run_reduce(ArgReducer<scalar_t, true>{}, args.x, args.outer, args.r, args.inner, args.out, args.indices, s, ls);
    else
      run_reduce(ArgReducer<scalar_t, false>{}, args.x, args.outer, args.r, args.inner, args.out, args.indices, s, ls);
  });
}

}  // namespace cuda
}  // namespace tandem
