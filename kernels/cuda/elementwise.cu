// CUDA elementwise kernels: unary ops and their derivatives, binary ops with broadcasting, where.
#include <type_traits>

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
// Vectors per thread per grid-stride step: all loads are issued before any store, for bytes in flight.
constexpr int kUnroll = 2;

template <typename T, int N>
__device__ __forceinline__ void load_into(const T* p, T* dst) {
  Vec<T, N> t = load_vec<T, N>(p);
#pragma unroll
  for (int e = 0; e < N; ++e) dst[e] = t.v[e];
}
template <typename T, int N>
__device__ __forceinline__ void store_from(T* p, const T* src) {
  Vec<T, N> t;
#pragma unroll
  for (int e = 0; e < N; ++e) t.v[e] = src[e];
  store_vec<T, N>(p, t);
}

// y = op(x) over n contiguous elements, V per access (V = 1 when a pointer is not 16-byte aligned).
// The last n % V elements are done one each by the first threads.
template <typename T, int V>
__global__ void unary_kernel(UnaryOp op, const T* x, T* y, int64_t n, UnaryParams p) {
  const int64_t nvec = n / V;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * kUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x; base < nvec;
       base += step) {
    T v[kUnroll * V] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      if (i < nvec) load_into<T, V>(x + i * V, v + u * V);
    }
    apply_unary(op, v, p);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      if (i < nvec) store_from<T, V>(y + i * V, v + u * V);
    }
  }
  if (V > 1 && tid < n - nvec * V) {
    T v[1] = {x[nvec * V + tid]};
    apply_unary(op, v, p);
    y[nvec * V + tid] = v[0];
  }
}

// gx = gy * op'(x) over n contiguous elements; x or y is null when the derivative does not read it.
template <typename T, int V>
__global__ void unary_backward_kernel(UnaryOp op, const T* x, const T* y, const T* gy, T* gx, int64_t n,
                                      UnaryParams p) {
  const int64_t nvec = n / V;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x * kUnroll;
  for (int64_t base = static_cast<int64_t>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x; base < nvec;
       base += step) {
    T xv[kUnroll * V] = {}, yv[kUnroll * V] = {}, g[kUnroll * V] = {};
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      if (i < nvec) {
        if (x != nullptr) load_into<T, V>(x + i * V, xv + u * V);
        if (y != nullptr) load_into<T, V>(y + i * V, yv + u * V);
        load_into<T, V>(gy + i * V, g + u * V);
      }
    }
    apply_unary_grad(op, xv, yv, g, p);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      int64_t i = base + static_cast<int64_t>(u) * blockDim.x;
      if (i < nvec) store_from<T, V>(gx + i * V, g + u * V);
    }
  }
  if (V > 1 && tid < n - nvec * V) {
    int64_t i = nvec * V + tid;
    T xv[1] = {x != nullptr ? x[i] : T(0)}, yv[1] = {y != nullptr ? y[i] : T(0)}, g[1] = {gy[i]};
    apply_unary_grad(op, xv, yv, g, p);
    gx[i] = g[0];
  }
}

// out = a op b with out contiguous, V = 16 bytes of out per access. Each input's innermost stride is 1
// (read as a vector: the host checked alignment) or 0 (one value broadcast over the vector); the index
// arithmetic is done once per vector.
template <typename T, typename I>
__global__ void binary_vec_kernel(BinaryOp op, const T* a, StridedDesc ad, bool a_vec, const T* b, StridedDesc bd,
                                  bool b_vec, T* out, StridedDesc od, I nvec) {
  constexpr int V = vec_width<T>();
  const StridedDesc* const ds[2] = {&ad, &bd};
  const I step = static_cast<I>(gridDim.x) * blockDim.x * kUnroll;
  for (I base = static_cast<I>(blockIdx.x) * blockDim.x * kUnroll + threadIdx.x; base < nvec; base += step) {
    T va[kUnroll * V] = {}, vb[kUnroll * V] = {}, vo[kUnroll * V];
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      I i = base + static_cast<I>(u) * blockDim.x;
      if (i < nvec) {
        I off[2];
        strided_offsets<I, 2>(i * V, od, ds, off);
        if (a_vec) {
          load_into<T, V>(a + off[0], va + u * V);
        } else {
          T s = a[off[0]];
#pragma unroll
          for (int e = 0; e < V; ++e) va[u * V + e] = s;
        }
        if (b_vec) {
          load_into<T, V>(b + off[1], vb + u * V);
        } else {
          T s = b[off[1]];
#pragma unroll
          for (int e = 0; e < V; ++e) vb[u * V + e] = s;
        }
      }
    }
    apply_binary(op, va, vb, vo);
#pragma unroll
    for (int u = 0; u < kUnroll; ++u) {
      I i = base + static_cast<I>(u) * blockDim.x;
      if (i < nvec) store_from<T, V>(out + i * V, vo + u * V);
    }
  }
}

// Any strides, one element per step: arithmetic ops writing T, or comparisons writing u8.
template <typename T, bool kCompare, typename I>
__global__ void binary_strided_kernel(BinaryOp op, const T* a, StridedDesc ad, const T* b, StridedDesc bd, void* out,
                                      StridedDesc od, I n) {
  const StridedDesc* const ds[3] = {&od, &ad, &bd};
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    I off[3];
    strided_offsets<I, 3>(i, od, ds, off);
    if constexpr (kCompare) {
      static_cast<uint8_t*>(out)[off[0]] = apply_compare(op, a[off[1]], b[off[2]]);
    } else {
      T x[1] = {a[off[1]]}, y[1] = {b[off[2]]}, r[1];
      apply_binary(op, x, y, r);
      static_cast<T*>(out)[off[0]] = r[0];
    }
  }
}

// out = cond ? a : b over elements of one byte size.
template <typename E, typename I>
__global__ void where_kernel(const uint8_t* cond, StridedDesc cd, const E* a, StridedDesc ad, const E* b,
                             StridedDesc bd, E* out, StridedDesc od, I n) {
  const StridedDesc* const ds[4] = {&od, &cd, &ad, &bd};
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    I off[4];
    strided_offsets<I, 4>(i, od, ds, off);
    out[off[0]] = cond[off[1]] ? a[off[2]] : b[off[3]];
  }
}

// Whether an input can be read by binary_vec_kernel: innermost stride 0, or 1 with every vector aligned.
bool vec_readable(const void* p, const StridedDesc& d, int V) {
  int last = d.ndim - 1;
  if (d.strides[last] == 0) return true;
  if (d.strides[last] != 1 || !is_aligned(p, 16)) return false;
  for (int i = 0; i < last; ++i)
    if (d.strides[i] % V != 0) return false;
  return true;
}

// Arithmetic ops (T = f32/f64): the vectorized kernel when the layout allows it, else the strided one.
template <typename T>
void launch_arithmetic(BinaryOp op, const T* a, const StridedDesc& ad, const T* b, const StridedDesc& bd, T* out,
                       const StridedDesc& od, bool narrow, const LaunchScope& ls) {
  constexpr int V = vec_width<T>();
  const int64_t n = od.numel();
  const int last = od.ndim - 1;
  if (od.strides[last] == 1 && od.shape[last] % V == 0 && is_aligned(out, 16) && vec_readable(a, ad, V) &&
      vec_readable(b, bd, V)) {
    const bool a_vec = ad.strides[last] == 1, b_vec = bd.strides[last] == 1;
    const int64_t nvec = n / V;
    const unsigned grid = grid_for(ceil_div(nvec, kThreads * kUnroll), ls.device());
    if (narrow)
      launch_kernel(TD_KERNEL(binary_vec_kernel<T, uint32_t>), grid, kThreads, 0, ls.stream(), op, a, ad, a_vec, b, bd,
                    b_vec, out, od, static_cast<uint32_t>(nvec));
    else
      launch_kernel(TD_KERNEL(binary_vec_kernel<T, int64_t>), grid, kThreads, 0, ls.stream(), op, a, ad, a_vec, b, bd,
                    b_vec, out, od, nvec);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "binary_vec_kernel");
    return;
  }
  const unsigned grid = grid_for(ceil_div(n, kThreads), ls.device());
  if (narrow)
    launch_kernel(TD_KERNEL(binary_strided_kernel<T, false, uint32_t>), grid, kThreads, 0, ls.stream(), op, a, ad, b,
                  bd, out, od, static_cast<uint32_t>(n));
  else
    launch_kernel(TD_KERNEL(binary_strided_kernel<T, false, int64_t>), grid, kThreads, 0, ls.stream(), op, a, ad, b, bd,
                  out, od, n);
  TD_CUDA_CHECK_LAUNCH(ls.stream(), "binary_strided_kernel");
}

template <typename T>
void launch_comparison(BinaryOp op, const T* a, const StridedDesc& ad, const T* b, const StridedDesc& bd, uint8_t* out,
                       const StridedDesc& od, bool narrow, const LaunchScope& ls) {
  const int64_t n = od.numel();
  const unsigned grid = grid_for(ceil_div(n, kThreads), ls.device());
  if (narrow)
    launch_kernel(TD_KERNEL(binary_strided_kernel<T, true, uint32_t>), grid, kThreads, 0, ls.stream(), op, a, ad, b, bd,
                  out, od, static_cast<uint32_t>(n));
  else
    launch_kernel(TD_KERNEL(binary_strided_kernel<T, true, int64_t>), grid, kThreads, 0, ls.stream(), op, a, ad, b, bd,
                  out, od, n);
  TD_CUDA_CHECK_LAUNCH(ls.stream(), "binary_strided_kernel (comparison)");
}
}  // namespace

void CudaBackend::unary(const UnaryArgs& args, const Stream& s) {
  if (args.n <= 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(args.t, "unary op", {
    constexpr int V = vec_width<scalar_t>();
    const scalar_t* xp = static_cast<const scalar_t*>(args.x);
    scalar_t* yp = static_cast<scalar_t*>(args.y);
    if (is_aligned(args.x, 16) && is_aligned(args.y, 16)) {
      launch_kernel(TD_KERNEL(unary_kernel<scalar_t, V>),
                    grid_for(ceil_div(args.n, kThreads * kUnroll * V), ls.device()), kThreads, 0, ls.stream(), args.op,
                    xp, yp, args.n, args.p);
    } else {
      launch_kernel(TD_KERNEL(unary_kernel<scalar_t, 1>), grid_for(ceil_div(args.n, kThreads * kUnroll), ls.device()),
                    kThreads, 0, ls.stream(), args.op, xp, yp, args.n, args.p);
    }
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "unary_kernel");
  });
}

void CudaBackend::unary_backward(const UnaryBackwardArgs& args, const Stream& s) {
  if (args.n <= 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(args.t, "unary backward", {
    constexpr int V = vec_width<scalar_t>();
    auto xp = static_cast<const scalar_t*>(args.x), yp = static_cast<const scalar_t*>(args.y);
    auto gp = static_cast<const scalar_t*>(args.gy);
    auto op_ = static_cast<scalar_t*>(args.gx);
    bool vec = is_aligned(args.x, 16) && is_aligned(args.y, 16) && is_aligned(args.gy, 16) && is_aligned(args.gx, 16);
    if (vec) {
      launch_kernel(TD_KERNEL(unary_backward_kernel<scalar_t, V>),
                    grid_for(ceil_div(args.n, kThreads * kUnroll * V), ls.device()), kThreads, 0, ls.stream(), args.op,
                    xp, yp, gp, op_, args.n, args.p);
    } else {
      launch_kernel(TD_KERNEL(unary_backward_kernel<scalar_t, 1>),
                    grid_for(ceil_div(args.n, kThreads * kUnroll), ls.device()), kThreads, 0, ls.stream(), args.op, xp,
                    yp, gp, op_, args.n, args.p);
    }
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "unary_backward_kernel");
  });
}

void CudaBackend::binary(const BinaryArgs& args, const Stream& s) {
  if (args.od.numel() == 0) return;
  LaunchScope ls(s);
  auto c = collapse<3>({&args.od, &args.ad, &args.bd});
  const StridedDesc* all[3] = {&c[0], &c[1], &c[2]};
  const bool narrow = fits_int32(c[0].numel(), all, 3);
  if (is_comparison(args.op)) {
    TD_DISPATCH_NUMERIC(args.t, "comparison", {
      launch_comparison<scalar_t>(args.op, static_cast<const scalar_t*>(args.a), c[1],
                                  static_cast<const scalar_t*>(args.b), c[2], static_cast<uint8_t*>(args.out), c[0],
                                  narrow, ls);
    });
    return;
  }
  TD_DISPATCH_FLOAT(args.t, "binary op", {
    launch_arithmetic<scalar_t>(args.op, static_cast<const scalar_t*>(args.a), c[1],
                                static_cast<const scalar_t*>(args.b), c[2], static_cast<scalar_t*>(args.out), c[0],
                                narrow, ls);
  });
}

void CudaBackend::where(const WhereArgs& args, const Stream& s) {
  if (args.od.numel() == 0) return;
  LaunchScope ls(s);
  auto c = collapse<4>({&args.od, &args.cd, &args.ad, &args.bd});
  const int64_t n = c[0].numel();
  const StridedDesc* all[4] = {&c[0], &c[1], &c[2], &c[3]};
  const bool narrow = fits_int32(n, all, 4);
  const unsigned grid = grid_for(ceil_div(n, kThreads), ls.device());
  const uint8_t* cp = static_cast<const uint8_t*>(args.cond);
  TD_DISPATCH_BYTES(args.t, {
    auto ap = static_cast<const scalar_t*>(args.a), bp = static_cast<const scalar_t*>(args.b);
    auto op = static_cast<scalar_t*>(args.out);
    if (narrow)
      launch_kernel(TD_KERNEL(where_kernel<scalar_t, uint32_t>), grid, kThreads, 0, ls.stream(), cp, c[1], ap, c[2], bp,
                    c[3], op, c[0], static_cast<uint32_t>(n));
    else
      launch_kernel(TD_KERNEL(where_kernel<scalar_t, int64_t>), grid, kThreads, 0, ls.stream(), cp, c[1], ap, c[2], bp,
                    c[3], op, c[0], n);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "where_kernel");
  });
}

}  // namespace cuda
}  // namespace tandem
