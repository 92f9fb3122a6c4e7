// CUDA softmax and log-softmax over the middle dim of a contiguous [outer, n, inner] tensor, and their
// backward (formulas of kernels/cpu/reduce.cc). Rows short enough are held in registers, so x is read
// once; longer ones take an online max-and-sum pass and a second pass that writes. Sums accumulate in
// double in a fixed order (deterministic).
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
// Chunks of vec_width<T>() elements a lane of a row kernel keeps in registers (rows up to 256 * 4 chunks).
constexpr int kRowCached = 4;
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

// y from x, the row max m and the sum s of exp(x - m).
template <typename T>
struct SoftmaxOut {
  bool log;
  T m;
  double lse;  // log: m + log(s)
  T inv;       // softmax: 1 / s
  __device__ __forceinline__ SoftmaxOut(bool log_, T m_, double s) : log(log_), m(m_) {
    lse = static_cast<double>(m_) + ::log(s);
    inv = static_cast<T>(1.0 / s);
  }
  __device__ __forceinline__ T operator()(T v) const {
    return log ? static_cast<T>(static_cast<double>(v) - lse) : exp_of(v - m) * inv;
  }
};

// Loads chunk c of a row (V elements from c * V; one vector access when `vec`, else element by element up
// to n).
template <typename T, int V>
__device__ __forceinline__ void load_chunk(const T* row, int64_t c, int64_t n, bool vec, T (&v)[V]) {
  if (vec) {
    Vec<T, V> t = load_vec<T, V>(row + c * V);
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = t.v[e];
  } else {
#pragma unroll
    for (int e = 0; e < V; ++e) v[e] = c * V + e < n ? row[c * V + e] : T(0);
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

// inner == 1: a group of G lanes per row (blockDim.x = kThreads); lane l owns chunks l, l + G, ...
template <typename T>
__global__ void __launch_bounds__(kThreads)
    softmax_rows_kernel(bool log, const T* x, T* y, int64_t rows, int64_t n, int G, bool vec) {
  constexpr int V = vec_width<T>();
  __shared__ T smem_m[kThreads / 32];
  __shared__ double smem_s[kThreads / 32];
  __shared__ MaxSum<T> smem_ms[kThreads / 32];
  const int groups = blockDim.x / G, group = threadIdx.x / G, lane = threadIdx.x % G;
  const int64_t nchunks = (n + V - 1) / V;
  const bool cached = nchunks <= static_cast<int64_t>(kRowCached) * G;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * groups; base < rows;
       base += static_cast<int64_t>(gridDim.x) * groups) {
    const int64_t row = base + group;
    const bool active = row < rows;
    const T* xr = x + row * n;
    T* yr = y + row * n;
    if (cached) {
      T v[kRowCached][V];
      T m = neg_inf<T>();
#pragma unroll
      for (int k = 0; k < kRowCached; ++k) {
        const int64_t c = lane + static_cast<int64_t>(k) * G;
        if (active && c < nchunks) {
          load_chunk<T, V>(xr, c, n, vec, v[k]);
#pragma unroll
          for (int e = 0; e < V; ++e)
            if (c * V + e < n) m = max_keep(m, v[k][e]);
        }
      }
      m = group_reduce(
          m, G, [](T a, T b) { return max_keep(a, b); }, smem_m);
      double s = 0.0;
#pragma unroll
      for (int k = 0; k < kRowCached; ++k) {
        const int64_t c = lane + static_cast<int64_t>(k) * G;
        if (active && c < nchunks) {
#pragma unroll
          for (int e = 0; e < V; ++e)
            if (c * V + e < n) s += static_cast<double>(exp_of(v[k][e] - m));
        }
      }
      s = group_reduce(
          s, G, [](double a, double b) { return a + b; }, smem_s);
      const SoftmaxOut<T> f(log, m, s);
#pragma unroll
      for (int k = 0; k < kRowCached; ++k) {
        const int64_t c = lane + static_cast<int64_t>(k) * G;
        if (active && c < nchunks) {
#pragma unroll
          for (int e = 0; e < V; ++e) v[k][e] = f(v[k][e]);
          store_chunk<T, V>(yr, c, n, vec, v[k]);
        }
      }
    } else {
      MaxSum<T> acc{neg_inf<T>(), 0.0};
      if (active) {
#pragma unroll 4
        for (int64_t c = lane; c < nchunks; c += G) {
          T v[V];
          load_chunk<T, V>(xr, c, n, vec, v);
#pragma unroll
          for (int e = 0; e < V; ++e)
            if (c * V + e < n) online_add(acc, v[e]);
        }
      }
      acc = group_reduce(
          acc, G, [](const MaxSum<T>& a, const MaxSum<T>& b) { return online_combine(a, b); }, smem_ms);
      const SoftmaxOut<T> f(log, acc.m, finish_sum(acc));
      if (active) {
#pragma unroll 4
        for (int64_t c = lane; c < nchunks; c += G) {
          T v[V];
          load_chunk<T, V>(xr, c, n, vec, v);
#pragma unroll
          for (int e = 0; e < V; ++e) v[e] = f(v[e]);
          store_chunk<T, V>(yr, c, n, vec, v);
        }
      }
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
}  // namespace

void CudaBackend::softmax(bool log, DType t, const void* x, void* y, int64_t outer, int64_t n, int64_t inner,
                          const Stream& s) {
  if (outer * n * inner == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(t, "softmax", {
    auto xp = static_cast<const scalar_t*>(x);
    auto yp = static_cast<scalar_t*>(y);
    if (inner == 1) {
      constexpr int V = vec_width<scalar_t>();
      const int G = row_lanes(n, V);
      const bool vec = n % V == 0 && is_aligned(x, 16) && is_aligned(y, 16);
      launch_kernel(TD_KERNEL(softmax_rows_kernel<scalar_t>), grid_for(ceil_div(outer, kThreads / G), ls.device()),
                    kThreads, 0, ls.stream(), log, xp, yp, outer, n, G, vec);
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "softmax_rows_kernel");
    } else {
      launch_kernel(TD_KERNEL(softmax_cols_kernel<scalar_t>), grid_for(ceil_div(outer * inner, kColX), ls.device()),
                    dim3(kColX, kColY), 0, ls.stream(), log, xp, yp, outer, n, inner);
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "softmax_cols_kernel");
    }
  });
}

void CudaBackend::softmax_backward(bool log, DType t, const void* y, const void* gy, void* gx, int64_t outer, int64_t n,
                                   int64_t inner, const Stream& s) {
  if (outer * n * inner == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(t, "softmax backward", {
    auto yp = static_cast<const scalar_t*>(y);
    auto gp = static_cast<const scalar_t*>(gy);
    auto op = static_cast<scalar_t*>(gx);
    if (inner == 1) {
      constexpr int V = vec_width<scalar_t>();
      const int G = row_lanes(n, V);
      const bool vec = n % V == 0 && is_aligned(y, 16) && is_aligned(gy, 16) && is_aligned(gx, 16);
      launch_kernel(TD_KERNEL(softmax_backward_rows_kernel<scalar_t>),
                    grid_for(ceil_div(outer, kThreads / G), ls.device()), kThreads, 0, ls.stream(), log, yp, gp, op,
                    outer, n, G, vec);
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "softmax_backward_rows_kernel");
    } else {
      launch_kernel(TD_KERNEL(softmax_backward_cols_kernel<scalar_t>),
                    grid_for(ceil_div(outer * inner, kColX), ls.device()), dim3(kColX, kColY), 0, ls.stream(), log, yp,
                    gp, op, outer, n, inner);
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "softmax_backward_cols_kernel");
    }
  });
}

}  // namespace cuda
}  // namespace tandem
