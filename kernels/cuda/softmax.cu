// CUDA softmax and log-softmax over the middle dim of a contiguous [outer, n, inner] tensor, and their
// backward (formulas of kernels/cpu/reduce.cc). Rows short enough are held in registers, so x is read
// once; longer ones take an online max-and-sum pass and a second pass that writes. Sums accumulate in
// double in a fixed order (deterministic).
#include <algorithm>
#include <cmath>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/math.cuh"
#include "kernels/dispatch.h"
#include "runtime/base/cuda_check.h"

namespace tandem {
namespace cuda {

namespace {
// Chunks of vec_width<T>() elements a lane of the backward row kernel keeps in registers (rows up to 256 * 4
// chunks).
constexpr int kRowCached = 4;
// The forward row kernel: kMaxCached chunks per lane, up to kThreads lanes per row: rows up to 2048 chunks
// (8192 f32) are read once; rows up to kThreads * kMaxCachedWide chunks (16384 f32) too, a block of kThreads
// lanes per row with twice the registers (two blocks per SM at most 128 registers a lane, no spills on sm_90,
// each lane with 16 loads in flight), where the long-row kernel would read them twice and pay a 1024-thread
// block's reductions per row.
constexpr int kMaxCached = 8;
constexpr int kMaxCachedWide = 16;
// Longer rows: a block of kLongThreads per row or row segment; one row per block and two blocks per SM keep
// the rows in flight within L2 for their second read. Rows are split when there are fewer than
// kLongRowBlocks of them (about two per SM), into segments of at least kLongSegChunks chunks.
constexpr int kLongThreads = 1024;
constexpr int64_t kLongRowBlocks = 256;
constexpr int64_t kLongSegChunks = int64_t{kLongThreads} * 16;
static_assert(kLongRowBlocks <= kLongThreads, "softmax_long_rows_kernel combines a row's segments a thread each");
// Column kernels: blockDim = (kColX, kColY); each thread keeps up to kColCached values of its column.
constexpr int kColX = 32;
constexpr int kColY = 8;
constexpr int kColCached = 8;

template <typename T>
__device__ __forceinline__ T neg_inf() {
  return static_cast<T>(-INFINITY);
}

// Max as the CPU's std::max(m, v): a NaN v is ignored (the NaN then shows up in the sum).
template <typename T>
__device__ __forceinline__ T max_keep(T m, T v) {
  return m < v ? v : m;
}

// Running (max, sum of exp(x - max)) of an online softmax pass.
template <typename T>
struct MaxSum {
  T m;
  double s;
};
template <typename T>
__device__ __forceinline__ MaxSum<T> shfl_xor(const MaxSum<T>& a, int mask, int width) {
  return {cuda::shfl_xor(a.m, mask, width), cuda::shfl_xor(a.s, mask, width)};
}

template <typename T>
__device__ __forceinline__ void online_add(MaxSum<T>& a, T v) {
  if (v == neg_inf<T>()) return;  // exp(-inf - max) = 0 (all -inf rows are made NaN in finish_sum)
  if (v > a.m) {
    a.s = a.s * static_cast<double>(exp_of(a.m - v)) + 1.0;
    a.m = v;
  } else {
    a.s += static_cast<double>(exp_of(v - a.m));  // NaN v: the sum becomes NaN
  }
}

template <typename T>
__device__ __forceinline__ MaxSum<T> online_combine(const MaxSum<T>& a, const MaxSum<T>& b) {
  MaxSum<T> r;
  r.m = max_keep(a.m, b.m);
  r.s = (a.s == 0.0 ? 0.0 : a.s * static_cast<double>(exp_of(a.m - r.m))) +
        (b.s == 0.0 ? 0.0 : b.s * static_cast<double>(exp_of(b.m - r.m)));
  return r;
}

// The CPU sums exp(x - max) directly, which is NaN when the max is infinite (an +inf, or only -inf).
template <typename T>
__device__ __forceinline__ double finish_sum(const MaxSum<T>& a) {
  return isinf(a.m) ? static_cast<double>(NAN) : a.s;
}

// y from x, the row max m and the sum s of exp(x - m). Log-softmax as (x - m) - log(s) in T: no conversion
// to double and back per element (conversions issue at a fraction of the FP32 rate and would bound the
// kernel).
template <typename T>
struct SoftmaxOut {
  bool log;
  T m;
  T log_s;  // log: log(s)
  T inv;    // softmax: 1 / s
  __device__ __forceinline__ SoftmaxOut(bool log_, T m_, double s)
      : log(log_), m(m_), log_s(static_cast<T>(::log(s))), inv(static_cast<T>(1.0 / s)) {}
  __device__ __forceinline__ T operator()(T v) const { return log ? (v - m) - log_s : exp_of(v - m) * inv; }
  // y from what the register-cached row kernel keeps: x (log-softmax) or exp(x - m) (softmax).
  __device__ __forceinline__ T from_stored(T v) const { return log ? (v - m) - log_s : v * inv; }
};

// Loads chunk c of a row (V elements from c * V; one vector access when `vec`, else element by element up
// to n, `pad` beyond).
template <typename T, int V>
__device__ __forceinline__ void load_chunk(const T* row, int64_t c, int64_t n, bool vec, T (&v)[V], T pad = T(0)) {
  if (vec) {
    Vec<T, V> t = load_vec<T, V>(row + c * V);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = t.v[e];
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = c * V + e < n ? row[c * V + e] : pad;
  }
}
template <typename T, int V>
__device__ __forceinline__ void store_chunk(T* row, int64_t c, int64_t n, bool vec, const T (&v)[V]) {
  if (vec) {
    Vec<T, V> t;
#pragma unroll
    for (int e = 0; e < V; ++e) t.v[e] = v[e];
    store_vec<T, V>(row + c * V, t);
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e)
      if (c * V + e < n) row[c * V + e] = v[e];
  }
}

// inner == 1, rows that fit in registers: a group of G <= kThreads lanes per row; lane l holds K chunks
// l, l + G, ..., l + (K - 1) G. The row is read once and written once: its max and its sum of exp(x - max)
// are two group reductions over registers (shuffles only for G <= 32: rows up to 1024 f32), and
// softmax keeps exp(x - max) for the output. Elements past the row's end hold -inf, which neither
// reduction sees. log and vec are template arguments: as run-time flags both paths stay live and double
// the registers.
template <typename T, bool kLog, bool kVec, int K>
__global__ void __launch_bounds__(kThreads, K > kMaxCached ? 2 : 1)
    softmax_rows_kernel(const T* x, T* y, int64_t rows, int64_t n, int G) {
  constexpr int V = vec_width<T>();
  constexpr bool log = kLog, vec = kVec;
  __shared__ T smem_m[kThreads / 32];
  __shared__ double smem_s[kThreads / 32];
  const int groups = blockDim.x / G, group = threadIdx.x / G, lane = threadIdx.x % G;
  const int64_t nchunks = (n + V - 1) / V;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups; base < rows;
       base += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t row = base + group;
    const bool active = row < rows;
    const T* xr = x + row * n;
    T* yr = y + row * n;
    T v[K][V];
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c = lane + static_cast<int64_t>(k) * G;
      if (active && c < nchunks) {
        load_chunk<T, V>(xr, c, n, vec, v[k], neg_inf<T>());
      } else {
#pragma unroll
        for (int e = 0; e < V; ++e) v[k][e] = neg_inf<T>();
      }
    }
    T m = neg_inf<T>();
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int e = 0; e < V; ++e) m = max_keep(m, v[k][e]);
    m = group_reduce(
        m, G, [](T a, T b) { return max_keep(a, b); }, smem_m);
    // exp(-inf - m) is 0 for the padding; a row whose max is infinite gets a NaN sum from its own
    // elements, as on the CPU. Softmax keeps exp(x - max) in place of x (x is not needed again);
    // log-softmax keeps x.
    double s = 0.0;
#pragma unroll
    for (int k = 0; k < K; ++k)
#pragma unroll
      for (int e = 0; e < V; ++e) {
        const T ex = exp_of(v[k][e] - m);
        s += static_cast<double>(ex);
        if (!log) v[k][e] = ex;
      }
    s = group_reduce(
        s, G, [](double a, double b) { return a + b; }, smem_s);
    const SoftmaxOut<T> f(log, m, s);
#pragma unroll
    for (int k = 0; k < K; ++k) {
      const int64_t c = lane + static_cast<int64_t>(k) * G;
      if (active && c < nchunks) {
#pragma unroll
        for (int e = 0; e < V; ++e) v[k][e] = f.from_stored(v[k][e]);
        store_chunk<T, V>(yr, c, n, vec, v[k]);
      }
    }
  }
}

// (max, sum of exp(x - max)) of the chunks lane, lane + G, ... of [c0, c1) of a row, a chunk at a time: the
// chunk's max first, the sum rescaled only when it grows, then one exp per element.
template <typename T, int V>
__device__ __forceinline__ MaxSum<T> chunk_stats(const T* row, int64_t c0, int64_t c1, int64_t n, int lane, int G,
                                                 bool vec) {
  MaxSum<T> a{neg_inf<T>(), 0.0};
#pragma unroll 4
  for (int64_t c = c0 + lane; c < c1; c += G) {
    T v[V];
    load_chunk<T, V>(row, c, n, vec, v, neg_inf<T>());
    T mc = neg_inf<T>();
#pragma unroll
    for (int e = 0; e < V; ++e) mc = max_keep(mc, v[e]);
    if (mc > a.m) {
      a.s *= static_cast<double>(exp_of(a.m - mc));  // 0 while a.m is -inf
      a.m = mc;
    }
    // -inf adds 0 (exp(-inf - -inf) would be NaN); a NaN makes the sum NaN.
#pragma unroll
    for (int e = 0; e < V; ++e) a.s += v[e] == neg_inf<T>() ? 0.0 : static_cast<double>(exp_of(v[e] - a.m));
  }
  return a;
}

// Writes f(x) over the chunks lane, lane + G, ... of [c0, c1) of a row.
template <typename T, int V>
__device__ __forceinline__ void chunk_apply(const SoftmaxOut<T>& f, const T* xr, T* yr, int64_t c0, int64_t c1,
                                            int64_t n, int lane, int G, bool vec) {
#pragma unroll 4
  for (int64_t c = c0 + lane; c < c1; c += G) {
    T v[V];
    load_chunk<T, V>(xr, c, n, vec, v);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = f(v[e]);
    store_chunk<T, V>(yr, c, n, vec, v);
  }
}

// inner == 1, rows too long for registers: a block of kLongThreads per (row, segment of seg_chunks chunks).
// One online pass gives the segment's (max, sum); with one segment per row the block then writes the row,
// reading it again while it is still in L2 (few rows are in flight: two 1024-thread blocks per SM). With
// several segments (few rows, which would leave SMs idle) the kernel runs twice: first it writes each
// segment's result to `out`, then, given them as `in`, each block combines its row's (thread t takes
// segment t; nseg <= kLongThreads) by group_reduce, whose order is fixed, so all of the row's blocks get
// the same statistics, and writes its segment.
template <typename T>
__global__ void __launch_bounds__(kLongThreads)
    softmax_long_rows_kernel(bool log, const T* x, T* y, int64_t rows, int64_t n, int64_t nseg, int64_t seg_chunks,
                             bool vec, const MaxSum<T>* in, MaxSum<T>* out) {
  constexpr int V = vec_width<T>();
  __shared__ MaxSum<T> smem[kMaxWarps];
  const int64_t nchunks = (n + V - 1) / V;
  const auto combine = [](const MaxSum<T>& a, const MaxSum<T>& b) { return online_combine(a, b); };
  for (int64_t item = blockIdx.x; item < rows * nseg; item += gridDim.x) {
    const int64_t row = item / nseg, seg = item - row * nseg;
    const int64_t c0 = seg * seg_chunks, c1 = min(nchunks, c0 + seg_chunks);
    const T* xr = x + row * n;
    MaxSum<T> a{neg_inf<T>(), 0.0};
    if (in == nullptr)
      a = chunk_stats<T, V>(xr, c0, c1, n, threadIdx.x, blockDim.x, vec);
    else if (threadIdx.x < nseg)
      a = in[row * nseg + threadIdx.x];
    a = group_reduce(a, blockDim.x, combine, smem);
    if (out != nullptr) {
      if (threadIdx.x == 0) out[item] = a;
    } else {
      chunk_apply<T, V>(SoftmaxOut<T>(log, a.m, finish_sum(a)), xr, y + row * n, c0, c1, n, threadIdx.x, blockDim.x,
                        vec);
    }
  }
}

// inner > 1: blockDim = (kColX, kColY). Thread x owns one column (o, i) of the flattened outer * inner
// columns (coalesced over i); the kColY threads of a column split its n rows (ty, ty + kColY, ...) and
// combine their partial results through shared memory, in order of ty.
template <typename T>
__global__ void __launch_bounds__(kColX* kColY)
    softmax_cols_kernel(bool log, const T* x, T* y, int64_t outer, int64_t n, int64_t inner) {
  __shared__ MaxSum<T> smem[kColY][kColX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t columns = outer * inner;
  const bool cached = n <= static_cast<int64_t>(kColY) * kColCached;
  for (int64_t tile = blockIdx.x; tile * kColX < columns; tile += gridDim.x) {
    const int64_t w = tile * kColX + tx;
    const bool active = w < columns;
    const int64_t start = active ? (w / inner) * n * inner + w % inner : 0;
    const T* xc = x + start;
    T* yc = y + start;
    T v[kColCached];
    MaxSum<T> acc{neg_inf<T>(), 0.0};
    if (cached) {
      T m = neg_inf<T>();
#pragma unroll
      for (int k = 0; k < kColCached; ++k) {
        const int64_t j = ty + static_cast<int64_t>(k) * kColY;
        if (active && j < n) {
          v[k] = xc[j * inner];
          m = max_keep(m, v[k]);
        }
      }
      smem[ty][tx].m = m;
      __syncthreads();
      m = smem[0][tx].m;
      for (int k = 1; k < kColY; ++k) m = max_keep(m, smem[k][tx].m);
      double s = 0.0;
#pragma unroll
      for (int k = 0; k < kColCached; ++k) {
        const int64_t j = ty + static_cast<int64_t>(k) * kColY;
        if (active && j < n) s += static_cast<double>(exp_of(v[k] - m));
      }
      __syncthreads();
      smem[ty][tx].s = s;
      __syncthreads();
      s = smem[0][tx].s;
      for (int k = 1; k < kColY; ++k) s += smem[k][tx].s;
      acc = {m, s};
    } else {
      if (active)
        for (int64_t j = ty; j < n; j += kColY) online_add(acc, xc[j * inner]);
      smem[ty][tx] = acc;
      __syncthreads();
      acc = smem[0][tx];
      for (int k = 1; k < kColY; ++k) acc = online_combine(acc, smem[k][tx]);
      acc.s = finish_sum(acc);
    }
    __syncthreads();  // smem is rewritten by the next tile
    const SoftmaxOut<T> f(log, acc.m, acc.s);
    if (!active) continue;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kColCached; ++k) {
        const int64_t j = ty + static_cast<int64_t>(k) * kColY;
        if (j < n) yc[j * inner] = f(v[k]);
      }
    } else {
      for (int64_t j = ty; j < n; j += kColY) yc[j * inner] = f(xc[j * inner]);
    }
  }
}

// gx from y, gy and s = sum(gy) (log) or sum(gy * y) (softmax).
template <typename T>
__device__ __forceinline__ T softmax_grad(bool log, T y, T g, T s) {
  return log ? g - exp_of(y) * s : y * (g - s);
}
template <typename T>
__device__ __forceinline__ double grad_term(bool log, T y, T g) {
  return log ? static_cast<double>(g) : static_cast<double>(g) * static_cast<double>(y);
}

template <typename T>
__global__ void __launch_bounds__(kThreads, 3)
    softmax_backward_rows_kernel(bool log, const T* y, const T* gy, T* gx, int64_t rows, int64_t n, int G, bool vec) {
  constexpr int V = vec_width<T>();
  __shared__ double smem[kThreads / 32];
  const int groups = blockDim.x / G, group = threadIdx.x / G, lane = threadIdx.x % G;
  const int64_t nchunks = (n + V - 1) / V;
  const bool cached = nchunks <= static_cast<int64_t>(kRowCached) * G;
  const auto add = [](double a, double b) { return a + b; };
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups; base < rows;
       base += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t row = base + group;
    const bool active = row < rows;
    const T *yr = y + row * n, *gr = gy + row * n;
    T* out = gx + row * n;
    double s = 0.0;
    if (cached) {
      T yv[kRowCached][V], gv[kRowCached][V];
#pragma unroll
      for (int k = 0; k < kRowCached; ++k) {
        const int64_t c = lane + static_cast<int64_t>(k) * G;
        if (active && c < nchunks) {
          load_chunk<T, V>(yr, c, n, vec, yv[k]);
          load_chunk<T, V>(gr, c, n, vec, gv[k]);
        }
      }
#pragma unroll
      for (int k = 0; k < kRowCached; ++k) {
        const int64_t c = lane + static_cast<int64_t>(k) * G;
        if (active && c < nchunks) {
#pragma unroll
          for (int e = 0; e < V; ++e)
            if (c * V + e < n) s += grad_term(log, yv[k][e], gv[k][e]);
        }
      }
      s = group_reduce(s, G, add, smem);
      const T ts = static_cast<T>(s);
#pragma unroll
      for (int k = 0; k < kRowCached; ++k) {
        const int64_t c = lane + static_cast<int64_t>(k) * G;
        if (active && c < nchunks) {
#pragma unroll
          for (int e = 0; e < V; ++e) gv[k][e] = softmax_grad(log, yv[k][e], gv[k][e], ts);
          store_chunk<T, V>(out, c, n, vec, gv[k]);
        }
      }
    } else {
      if (active) {
#pragma unroll 2
        for (int64_t c = lane; c < nchunks; c += G) {
          T yv[V], gv[V];
          load_chunk<T, V>(yr, c, n, vec, yv);
          load_chunk<T, V>(gr, c, n, vec, gv);
#pragma unroll
          for (int e = 0; e < V; ++e)
            if (c * V + e < n) s += grad_term(log, yv[e], gv[e]);
        }
      }
      s = group_reduce(s, G, add, smem);
      const T ts = static_cast<T>(s);
      if (active) {
#pragma unroll 2
        for (int64_t c = lane; c < nchunks; c += G) {
          T yv[V], gv[V];
          load_chunk<T, V>(yr, c, n, vec, yv);
          load_chunk<T, V>(gr, c, n, vec, gv);
#pragma unroll
          for (int e = 0; e < V; ++e) gv[e] = softmax_grad(log, yv[e], gv[e], ts);
          store_chunk<T, V>(out, c, n, vec, gv);
        }
      }
    }
  }
}

template <typename T>
__global__ void __launch_bounds__(kColX* kColY)
    softmax_backward_cols_kernel(bool log, const T* y, const T* gy, T* gx, int64_t outer, int64_t n, int64_t inner) {
  __shared__ double smem[kColY][kColX];
  const int tx = threadIdx.x, ty = threadIdx.y;
  const int64_t columns = outer * inner;
  const bool cached = n <= static_cast<int64_t>(kColY) * kColCached;
  for (int64_t tile = blockIdx.x; tile * kColX < columns; tile += gridDim.x) {
    const int64_t w = tile * kColX + tx;
    const bool active = w < columns;
    const int64_t start = active ? (w / inner) * n * inner + w % inner : 0;
    const T *yc = y + start, *gc = gy + start;
    T* out = gx + start;
    T yv[kColCached], gv[kColCached];
    double s = 0.0;
    if (cached) {
#pragma unroll
      for (int k = 0; k < kColCached; ++k) {
        const int64_t j = ty + static_cast<int64_t>(k) * kColY;
        if (active && j < n) {
          yv[k] = yc[j * inner];
          gv[k] = gc[j * inner];
          s += grad_term(log, yv[k], gv[k]);
        }
      }
    } else if (active) {
      for (int64_t j = ty; j < n; j += kColY) s += grad_term(log, yc[j * inner], gc[j * inner]);
    }
    smem[ty][tx] = s;
    __syncthreads();
    s = smem[0][tx];
    for (int k = 1; k < kColY; ++k) s += smem[k][tx];
    __syncthreads();  // smem is rewritten by the next tile
    if (!active) continue;
    const T ts = static_cast<T>(s);
    if (cached) {
#pragma unroll
      for (int k = 0; k < kColCached; ++k) {
        const int64_t j = ty + static_cast<int64_t>(k) * kColY;
        if (j < n) out[j * inner] = softmax_grad(log, yv[k], gv[k], ts);
      }
    } else {
      for (int64_t j = ty; j < n; j += kColY) out[j * inner] = softmax_grad(log, yc[j * inner], gc[j * inner], ts);
    }
  }
}

// Lanes per row: enough that the row fits the lanes' registers when it can (G * kRowCached chunks).
int row_lanes(int64_t n, int V) {
  const int64_t per_lane = ceil_div(ceil_div(n, V), kRowCached);
  int G = 1;
  while (G < kThreads && G < per_lane) G *= 2;
  return G;
}
int64_t pow2_ceil(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

template <typename T, bool kLog, bool kVec, int K>
void launch_cached_rows(const T* x, T* y, int64_t rows, int64_t n, const LaunchScope& ls) {
  const int G = static_cast<int>(pow2_ceil(ceil_div(ceil_div(n, vec_width<T>()), K)));
  launch_kernel(TD_KERNEL(softmax_rows_kernel<T, kLog, kVec, K>), grid_for(ceil_div(rows, kThreads / G), ls.device()),
                kThreads, 0, ls.stream(), x, y, rows, n, G);
  TD_CUDA_CHECK_LAUNCH(ls.stream(), "softmax_rows_kernel");
}

// The cached-rows kernel for K chunks per lane, its flags as template arguments.
template <typename T, int K>
void launch_cached_rows(bool log, bool vec, const T* x, T* y, int64_t rows, int64_t n, const LaunchScope& ls) {
  if (log)
    return vec ? launch_cached_rows<T, true, true, K>(x, y, rows, n, ls)
               : launch_cached_rows<T, true, false, K>(x, y, rows, n, ls);
  return vec ? launch_cached_rows<T, false, true, K>(x, y, rows, n, ls)
             : launch_cached_rows<T, false, false, K>(x, y, rows, n, ls);
}

// Softmax over rows (inner == 1). Rows that fit get the fewest lanes that hold them in kMaxCached chunks
// each, or a block of lanes with kMaxCachedWide each; longer ones the long-row kernels.
template <typename T>
void softmax_rows(bool log, const T* x, T* y, int64_t rows, int64_t n, const Stream& s, const LaunchScope& ls) {
  constexpr int V = vec_width<T>();
  const bool vec = n % V == 0 && is_aligned(x, 16) && is_aligned(y, 16);
  const int64_t nchunks = ceil_div(n, V);
  if (nchunks <= int64_t{kThreads} * kMaxCached) return launch_cached_rows<T, kMaxCached>(log, vec, x, y, rows, n, ls);
  if (nchunks <= int64_t{kThreads} * kMaxCachedWide)
    return launch_cached_rows<T, kMaxCachedWide>(log, vec, x, y, rows, n, ls);
  int64_t nseg = 1;
  if (rows < kLongRowBlocks)
    nseg = std::max<int64_t>(1, std::min(ceil_div(kLongRowBlocks, rows), nchunks / kLongSegChunks));
  const int64_t seg_chunks = ceil_div(nchunks, nseg);
  nseg = ceil_div(nchunks, seg_chunks);
  Storage partials;
  if (nseg > 1) partials = workspace(static_cast<size_t>(rows * nseg) * sizeof(MaxSum<T>), s);
  auto* part = static_cast<MaxSum<T>*>(partials.data());
  const unsigned grid = grid_for(rows * nseg, ls.device());
  launch_kernel(TD_KERNEL(softmax_long_rows_kernel<T>), grid, kLongThreads, 0, ls.stream(), log, x, y, rows, n, nseg,
                seg_chunks, vec, static_cast<const MaxSum<T>*>(nullptr), part);
  TD_CUDA_CHECK_LAUNCH(ls.stream(), "softmax_long_rows_kernel");
  if (nseg == 1) return;
  launch_kernel(TD_KERNEL(softmax_long_rows_kernel<T>), grid, kLongThreads, 0, ls.stream(), log, x, y, rows, n, nseg,
                seg_chunks, vec, static_cast<const MaxSum<T>*>(part), static_cast<MaxSum<T>*>(nullptr));
  TD_CUDA_CHECK_LAUNCH(ls.stream(), "softmax_long_rows_kernel");
}
}  // namespace

void CudaBackend::softmax(const SoftmaxArgs& args, const Stream& s) {
  if (args.outer * args.n * args.inner == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(args.t, "softmax", {
    auto xp = static_cast<const scalar_t*>(args.x);
    auto yp = static_cast<scalar_t*>(args.y);
    if (args.inner == 1) {
      softmax_rows(args.log, xp, yp, args.outer, args.n, s, ls);
    } else {
      launch_kernel(TD_KERNEL(softmax_cols_kernel<scalar_t>),
                    grid_for(ceil_div(args.outer * args.inner, kColX), ls.device()), dim3(kColX, kColY), 0, ls.stream(),
                    args.log, xp, yp, args.outer, args.n, args.inner);
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "softmax_cols_kernel");
    }
  });
}

void CudaBackend::softmax_backward(const SoftmaxBackwardArgs& args, const Stream& s) {
  if (args.outer * args.n * args.inner == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(args.t, "softmax backward", {
    auto yp = static_cast<const scalar_t*>(args.y);
    auto gp = static_cast<const scalar_t*>(args.gy);
    auto op = static_cast<scalar_t*>(args.gx);
    if (args.inner == 1) {
      constexpr int V = vec_width<scalar_t>();
      const int G = row_lanes(args.n, V);
      const bool vec = args.n % V == 0 && is_aligned(args.y, 16) && is_aligned(args.gy, 16) && is_aligned(args.gx, 16);
      launch_kernel(TD_KERNEL(softmax_backward_rows_kernel<scalar_t>),
                    grid_for(ceil_div(args.outer, kThreads / G), ls.device()), kThreads, 0, ls.stream(), args.log, yp,
                    gp, op, args.outer, args.n, G, vec);
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "softmax_backward_rows_kernel");
    } else {
      launch_kernel(TD_KERNEL(softmax_backward_cols_kernel<scalar_t>),
                    grid_for(ceil_div(args.outer * args.inner, kColX), ls.device()), dim3(kColX, kColY), 0, ls.stream(),
                    args.log, yp, gp, op, args.outer, args.n, args.inner);
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "softmax_backward_cols_kernel");
    }
  });
}

}  // namespace cuda
}  // namespace tandem
