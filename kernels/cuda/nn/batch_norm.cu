// CUDA batch normalization, with batch_norm_act's residual add and ReLU(6) fused. Per-channel sums accumulate in
// double in one pass over the data and a fixed-order finalize (partials per (split, channel) from block trees, then
// one thread per channel sums its splits in order), so results are deterministic; one elementwise pass then applies
// per-channel coefficients. Both passes walk NCHW planes or NHWC rows without dividing by the channel count, in
// 16-byte vectors where the shape allows. Activations of type T (bf16: loaded and stored as bf16, each result rounded
// once) go with per-channel operands of P = compute_t<T> (f32 for bf16), the arithmetic P's or double. The backward
// reads only what it needs: the activation's mask recomputed from x where the forward had no residual (Mask), and
// dx's pass reads the masked gradient back from the residual's where the first pass wrote it.
#include <algorithm>
#include <atomic>
#include <type_traits>

#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/nn/cuda_nn_backend.h"
#include "kernels/dispatch.h"
#include "runtime/base/cuda_check.h"

namespace tandem {
namespace cuda {

namespace {

// Element (o, c, i) of channel c lies at (o * channels + c) * inner + i. NCHW: outer = n, inner = hw;
// NHWC and 2-D inputs: outer = n * hw rows of `channels` values, inner = 1.
struct ChannelLayout {
  int64_t outer, channels, inner;
  __host__ __device__ int64_t per_channel() const { return outer * inner; }
  __host__ __device__ int64_t numel() const { return outer * channels * inner; }
};

ChannelLayout layout_of(const BatchNormGeometry& g) {
  if (g.channels_last || g.hw == 1) return {g.n * g.hw, g.c, 1};
  return {g.n, g.c, g.hw};
}

// Work units (vectors of a plane, or rows) per partial sum, and the most partials per channel.
constexpr int64_t kUnitsPerSplit = 4096;
constexpr int64_t kMaxSplits = 256;
constexpr int kRowChannels = 32;  // channel groups per block of the row partials (one warp across them)
constexpr int kRowLanes = 8;      // rows handled at once by such a block
// Inputs of at most this many splits have their partial sums finalized by the apply pass (every thread for its
// channels: splits * 16 bytes read per channel) instead of a kernel of their own.
constexpr int64_t kFoldSplits = 16;

// Elements per vector: 16 bytes of T where the layout allows (NCHW planes, or NHWC rows of channels, a whole number
// of vectors long), else 1. Fixed by the shape alone: the sums' order does not depend on pointer alignment.
template <typename T>
int vector_width(const ChannelLayout& L) {
  constexpr int V = vec_width<T>();
  return (L.inner > 1 ? L.inner : L.channels) % V == 0 ? V : 1;
}

// The V elements at p: one 16-byte access where `vec` (every operand aligned), else V scalar ones (the same values).
template <typename T, int V>
__device__ __forceinline__ Vec<T, V> load_n(const T* p, bool vec) {
  if (V > 1 && vec) return load_vec<T, V>(p);
  Vec<T, V> v;
#pragma unroll
  for (int e = 0; e < V; ++e) v.v[e] = p[e];
  return v;
}
template <typename T, int V>
__device__ __forceinline__ void store_n(T* p, const Vec<T, V>& v, bool vec) {
  if (V > 1 && vec) return store_vec<T, V>(p, v);
#pragma unroll
  for (int e = 0; e < V; ++e) p[e] = v.v[e];
}

// A vector's element e belongs to channel c + e along NHWC rows (C = V accumulators or coefficients), to channel
// c in an NCHW plane (C = 1).
template <int C>
__device__ __forceinline__ int slot(int e) {
  return C == 1 ? 0 : e;
}

// An activation as double (bf16 widened exactly).
template <typename T>
__device__ __forceinline__ double wide(T v) {
  return static_cast<double>(static_cast<compute_t<T>>(v));
}

// a * b + c rounded once: the forward's pre-activation, and the backward's recomputation of it, in the same bits.
__device__ __forceinline__ float fused_madd(float a, float b, float c) { return fmaf(a, b, c); }
__device__ __forceinline__ double fused_madd(double a, double b, double c) { return fma(a, b, c); }

// The forward's per-channel operands: y = act((x - m) * k + b (+ r)), k = weight * invstd rounded once to P.
template <typename P>
struct Affine {
  P m, k, b;
};
template <typename P>
__device__ __forceinline__ Affine<P> affine_from(P mean, double invstd, int64_t c, const P* weight, const P* bias) {
  return {mean, static_cast<P>((weight ? static_cast<double>(weight[c]) : 1.0) * invstd), bias ? bias[c] : P(0)};
}
template <typename P>
__device__ __forceinline__ Affine<P> affine_of(int64_t c, const P* mean, double invstd, const P* weight,
                                               const P* bias) {
  return affine_from(mean[c], invstd, c, weight, bias);
}
template <typename P, typename T>
__device__ __forceinline__ P pre_activation(T x, const Affine<P>& f) {
  return fused_madd(P(x) - f.m, f.k, f.b);
}
// The fused epilogue (ReLU or ReLU6) on a pre-activation, rounded once to T.
template <typename T, typename P>
__device__ __forceinline__ T activate(P u, BnActivation act) {
  if (act != BnActivation::None) u = u > P(0) ? (act == BnActivation::Relu6 && u > P(6) ? P(6) : u) : P(0);
  return T(u);
}

// The ops of the partial sums: coef(c) is what a thread keeps for channel c across its elements; op(i, coefs, a, b)
// adds element vector i's terms to the sums a and b.
template <typename T>
struct StatsOp {  // sum of x and of x^2
  // The ops are kernel parameters, which the simulated GPU reads word by word as possible device pointers: no
  // padding, whose stack garbage could look like one (flags are 4 or 8 bytes, paired to fill 8).
  const T* x;
  int64_t vec;  // a bool
  struct Coef {};
  __device__ __forceinline__ Coef coef(int64_t) const { return {}; }
  template <int V, int C>
  __device__ __forceinline__ void operator()(int64_t i, const Coef (&)[C], double (&a)[C], double (&b)[C]) const {
    const Vec<T, V> v = load_n<T, V>(x + i, vec);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const double d = wide(v.v[e]);
      a[slot<C>(e)] += d;
      b[slot<C>(e)] += d * d;
    }
  }
};

// The fused epilogue's derivative, read from its output value y.
template <typename T>
__device__ __forceinline__ bool passes(T y, BnActivation act) {
  const compute_t<T> v(y);
  return act == BnActivation::None || (v > 0 && (act == BnActivation::Relu || v < 6));
}

// Where the backward's mask (the epilogue's derivative) comes from: none (no activation, or a gradient masked
// before), the output y read back, or y recomputed from x with the forward's arithmetic (BatchNormActBackwardArgs's
// mask_from_x: one read fewer per pass).
enum class MaskFrom : int32_t { None, Y, X };

// The backward's mask: where the epilogue passes the gradient. MaskFrom::X is the compile-time kFromX, so that the
// other kernels keep no forward operands in registers.
template <typename T, bool kFromX, typename P>
struct Mask {
  const T* y;  // read with MaskFrom::Y
  const P* weight;
  const P* invstd;
  const P* bias;
  BnActivation act;
  MaskFrom from;  // X exactly when kFromX
  // Channel c's mean (m) and, with kFromX, the forward's scale and shift (k, b).
  __device__ __forceinline__ Affine<P> coef(int64_t c, const P* mean) const {
    return kFromX ? affine_of(c, mean, static_cast<double>(invstd[c]), weight, bias) : Affine<P>{mean[c], P(0), P(0)};
  }
  // The outputs at element vector i: y read back (MaskFrom::Y), else unused.
  template <int V>
  __device__ __forceinline__ Vec<T, V> outputs(int64_t i, const Vec<T, V>& xv, bool vec) const {
    return !kFromX && from == MaskFrom::Y ? load_n<T, V>(y + i, vec) : xv;
  }
  __device__ __forceinline__ bool passes_at(T x, T yv, const Affine<P>& f) const {
    if (kFromX) return passes(activate<T>(pre_activation(x, f), act), act);
    return from != MaskFrom::Y || passes(yv, act);
  }
};

template <typename T, bool kFromX = false, typename P = compute_t<T>>
struct GradOp {  // sum of g and of g * (x - mean), g = dy masked by the activation's derivative; g goes to dres
  const T* x;
  const T* dy;
  const P* mean;
  T* dres;
  Mask<T, kFromX, P> mask;
  int32_t accumulate;  // a bool, as 4 bytes: no padding in the kernel parameter
  int32_t vec;         // a bool
  struct Coef {
    Affine<P> f;  // f.m is the mean
  };
  __device__ __forceinline__ Coef coef(int64_t c) const { return {mask.coef(c, mean)}; }
  template <int V, int C>
  __device__ __forceinline__ void operator()(int64_t i, const Coef (&cf)[C], double (&a)[C], double (&b)[C]) const {
    Vec<T, V> g = load_n<T, V>(dy + i, vec);
    const Vec<T, V> xv = load_n<T, V>(x + i, vec);
    if (mask.from != MaskFrom::None) {
      const Vec<T, V> yv = mask.outputs(i, xv, vec);
#pragma unroll
      for (int e = 0; e < V; ++e)
        if (!mask.passes_at(xv.v[e], yv.v[e], cf[slot<C>(e)].f)) g.v[e] = T(P(0));
    }
    if (dres != nullptr) {
      Vec<T, V> r = g;
      if (accumulate) {
        r = load_n<T, V>(dres + i, vec);
#pragma unroll
        for (int e = 0; e < V; ++e) r.v[e] = T(P(r.v[e]) + P(g.v[e]));
      }
      store_n<T, V>(dres + i, r, vec);
    }
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const double d = wide(g.v[e]);
      a[slot<C>(e)] += d;
      b[slot<C>(e)] += d * (wide(xv.v[e]) - static_cast<double>(cf[slot<C>(e)].f.m));
    }
  }
};

// Planes (inner > 1): block (split s, channel c) sums vectors [s * per, (s + 1) * per) of its channel's
// per_channel / V (each inside one plane).
template <int V, typename Op>
__global__ void plane_partials(ChannelLayout L, int64_t per, Op op, double2* partial) {
  const int64_t c = blockIdx.y, inner = L.inner / V;
  const int64_t j1 = min(L.per_channel() / V, static_cast<int64_t>(blockIdx.x + 1) * per);
  double a[1] = {0}, b[1] = {0};
  int64_t j = static_cast<int64_t>(blockIdx.x) * per + threadIdx.x;
  if (j < j1) {
    const typename Op::Coef cf[1] = {op.coef(c)};
    int64_t o = j / inner, i = j - o * inner;
    for (; j < j1; j += blockDim.x) {
      op.template operator()<V, 1>((o * L.channels + c) * L.inner + i * V, cf, a, b);
      i += blockDim.x;
      while (i >= inner) {
        i -= inner;
        ++o;
      }
    }
  }
  __shared__ double sa[kMaxWarps], sb[kMaxWarps];
  auto add = [](double u, double v) { return u + v; };
  const double ta = group_reduce(a[0], static_cast<int>(blockDim.x), add, sa);
  const double tb = group_reduce(b[0], static_cast<int>(blockDim.x), add, sb);
  if (threadIdx.x == 0) partial[blockIdx.x * L.channels + c] = make_double2(ta, tb);
}

// Rows (inner == 1): block (split s, channel tile) has threadIdx.x across kRowChannels groups of V channels
// (coalesced) and threadIdx.y across rows.
template <int V, typename Op>
__global__ void row_partials(ChannelLayout L, int64_t per, Op op, double2* partial) {
  const int64_t c = (static_cast<int64_t>(blockIdx.y) * kRowChannels + threadIdx.x) * V;
  const int64_t r1 = min(L.outer, static_cast<int64_t>(blockIdx.x + 1) * per);
  double a[V] = {}, b[V] = {};
  if (c < L.channels) {
    typename Op::Coef cf[V];
#pragma unroll
    for (int e = 0; e < V; ++e) cf[e] = op.coef(c + e);
    for (int64_t r = static_cast<int64_t>(blockIdx.x) * per + threadIdx.y; r < r1; r += kRowLanes)
      op.template operator()<V, V>(r * L.channels + c, cf, a, b);
  }
  __shared__ double sa[kRowLanes][kRowChannels * V + 1], sb[kRowLanes][kRowChannels * V + 1];
#pragma unroll
  for (int e = 0; e < V; ++e) {
    sa[threadIdx.y][threadIdx.x * V + e] = a[e];
    sb[threadIdx.y][threadIdx.x * V + e] = b[e];
  }
  __syncthreads();
  if (threadIdx.y == 0 && c < L.channels)
#pragma unroll
    for (int e = 0; e < V; ++e) {
      double ta = 0, tb = 0;
      for (int k = 0; k < kRowLanes; ++k) {
        ta += sa[k][threadIdx.x * V + e];
        tb += sb[k][threadIdx.x * V + e];
      }
      partial[blockIdx.x * L.channels + c + e] = make_double2(ta, tb);
    }
}

struct Split {
  int64_t count, per;
};
// Units: vectors of a plane's channel, or rows. Fixed by the shape alone, so the summation order never depends on
// the GPU.
Split split_of(const ChannelLayout& L, int V) {
  int64_t units = L.inner > 1 ? L.per_channel() / V : L.outer;
  int64_t count = std::min(kMaxSplits, std::max<int64_t>(1, ceil_div(units, kUnitsPerSplit)));
  int64_t per = std::max<int64_t>(1, ceil_div(units, count));
  return {std::max<int64_t>(1, ceil_div(units, per)), per};
}

template <int V, typename Op>
void launch_partials_v(const ChannelLayout& L, const Split& sp, Op op, double2* partial, cudaStream_t stream) {
  if (L.inner > 1) {
    launch_kernel(TD_KERNEL(plane_partials<V, Op>),
                  dim3(static_cast<unsigned>(sp.count), static_cast<unsigned>(L.channels)), kThreads, 0, stream, L,
                  sp.per, op, partial);
    TD_CUDA_CHECK_LAUNCH(stream, "batch_norm plane_partials");
  } else {
    dim3 grid(static_cast<unsigned>(sp.count), static_cast<unsigned>(ceil_div(L.channels, kRowChannels * V)));
    launch_kernel(TD_KERNEL(row_partials<V, Op>), grid, dim3(kRowChannels, kRowLanes), 0, stream, L, sp.per, op,
                  partial);
    TD_CUDA_CHECK_LAUNCH(stream, "batch_norm row_partials");
  }
}

template <typename T, typename Op>
void launch_partials(const ChannelLayout& L, const Split& sp, Op op, double2* partial, cudaStream_t stream) {
  if (vector_width<T>(L) > 1)
    launch_partials_v<vec_width<T>()>(L, sp, op, partial, stream);
  else
    launch_partials_v<1>(L, sp, op, partial, stream);
}

// The finalize of the partial sums: a kernel of its own (one thread per channel), or, for inputs of few splits, done
// by the apply pass itself (a launch less per pass: what small images are bound by), each thread for its channels
// with the same arithmetic in the same order, and one designated thread per channel writing what the kernel writes.
// Channel c's sums over the splits, in order.
__device__ __forceinline__ double2 split_sums(const double2* partial, int64_t splits, int64_t channels, int64_t c) {
  double s = 0, q = 0;
  for (int64_t p = 0; p < splits; ++p) {
    s += partial[p * channels + c].x;
    q += partial[p * channels + c].y;
  }
  return make_double2(s, q);
}

// The forward's: the batch mean and inverse deviation (rounded to P), and the running statistics.
template <typename P>
struct StatsFinal {
  const double2* partial;  // null: finalized by the kernel before
  int64_t splits, channels;
  double count, eps, momentum;
  P* running_mean;  // may be null
  P* running_var;
  P* save_mean;
  P* save_invstd;
  // Channel c's mean and inverse deviation; with `write`, stored with the running statistics updated.
  __device__ __forceinline__ void at(int64_t c, bool write, P& mean_p, P& invstd_p) const {
    const double2 sq = split_sums(partial, splits, channels, c);
    const double mean = sq.x / count, var = fmax(sq.y / count - mean * mean, 0.0), invstd = 1.0 / sqrt(var + eps);
    mean_p = static_cast<P>(mean);
    invstd_p = static_cast<P>(invstd);
    if (!write) return;
    save_mean[c] = mean_p;
    save_invstd[c] = invstd_p;
    if (running_mean != nullptr) {
      running_mean[c] = static_cast<P>((1.0 - momentum) * static_cast<double>(running_mean[c]) + momentum * mean);
      running_var[c] = static_cast<P>((1.0 - momentum) * static_cast<double>(running_var[c]) +
                                      momentum * var * count / (count - 1.0));
    }
  }
};

// The backward's: dweight, dbias, and dx = g * k1 + (x - mean) * k2 + k3's coefficients.
template <typename P>
struct GradsFinal {
  const double2* partial;  // null: finalized by the kernel before
  int64_t splits, channels;
  double count;
  int64_t training;  // a bool
  const P* weight;   // may be null
  const P* invstd;
  P* dweight;  // may be null
  P* dbias;    // may be null
  // Channel c's k1, k2 and k3; with `write`, dweight and dbias stored.
  __device__ __forceinline__ void at(int64_t c, bool write, P& k1, P& k2, P& k3) const {
    const double2 sq = split_sums(partial, splits, channels, c);
    const double is = static_cast<double>(invstd[c]), w = weight ? static_cast<double>(weight[c]) : 1.0;
    k1 = static_cast<P>(w * is);
    k2 = training ? static_cast<P>(-w * is * is * is * sq.y / count) : P(0);
    k3 = training ? static_cast<P>(-w * is * sq.x / count) : P(0);
    if (!write) return;
    if (dbias != nullptr) dbias[c] = static_cast<P>(sq.x);
    if (dweight != nullptr) dweight[c] = static_cast<P>(sq.y * is);
  }
};

template <typename P>
__global__ void finalize_stats(StatsFinal<P> f) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  P mean, invstd;
  if (c < f.channels) f.at(c, true, mean, invstd);
}

template <typename P>
__global__ void finalize_grads(GradsFinal<P> f, P* k) {
  const int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (c < f.channels) f.at(c, true, k[c], k[f.channels + c], k[2 * f.channels + c]);
}

// y = act((x - mean) * k + b + r), r may be null; k = weight * invstd, from the batch's invstd (training) or the
// running variance (evaluation: invstd null). Computed in P, y rounded once to T.
// The apply ops: coef(c, first) is what a thread keeps for channel c across its elements (`first`: the thread
// designated to write channel c's finalized values, where the op finalizes); op(i, coefs) transforms element vector i.
// kFold (a compile-time choice, so that the other kernels keep their registers for the stream): this op finalizes.
template <typename T, bool kFold = false, typename P = compute_t<T>>
struct AffineOp {
  using Coef = Affine<P>;
  const T* x;
  const P* mean;
  const P* invstd;
  const P* var;
  const P* weight;
  const P* bias;
  double eps;
  const T* r;
  T* y;
  BnActivation act;
  int32_t vec;          // a bool
  StatsFinal<P> stats;  // kFold: mean and invstd are finalized here
  __device__ __forceinline__ Coef coef(int64_t c, bool first) const {
    if (kFold) {
      P m, is;
      stats.at(c, first, m, is);
      return affine_from(m, static_cast<double>(is), c, weight, bias);
    }
    const double is = invstd ? static_cast<double>(invstd[c]) : 1.0 / sqrt(static_cast<double>(var[c]) + eps);
    return affine_of(c, mean, is, weight, bias);
  }
  template <int V, int C>
  __device__ __forceinline__ void operator()(int64_t i, const Coef (&cf)[C]) const {
    Vec<T, V> v = load_n<T, V>(x + i, vec);
    Vec<T, V> rv;
    if (r != nullptr) rv = load_n<T, V>(r + i, vec);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      P u = pre_activation(v.v[e], cf[slot<C>(e)]);
      if (r != nullptr) u += P(rv.v[e]);
      v.v[e] = activate<T>(u, act);
    }
    store_n<T, V>(y + i, v, vec);
  }
};

// dx = g * k1 + (x - mean) * k2 + k3, g = dy masked by the activation's derivative (MaskFrom); computed in P, dx
// rounded once to T.
template <typename T, bool kFromX = false, bool kFold = false, typename P = compute_t<T>>
struct BackwardOp {
  struct Coef {
    P k1, k2, k3;
    Affine<P> f;  // f.m is the mean
  };
  const T* dy;  // or the gradient masked before (MaskFrom::None)
  const T* x;
  const P* mean;
  const P* k;  // k1, k2, k3: 3 rows of channels
  int64_t channels;
  T* dx;
  Mask<T, kFromX, P> mask;
  int64_t vec;          // a bool
  GradsFinal<P> grads;  // kFold: k1, k2 and k3 are finalized here (k unused)
  __device__ __forceinline__ Coef coef(int64_t c, bool first) const {
    if (kFold) {
      Coef q;
      grads.at(c, first, q.k1, q.k2, q.k3);
      q.f = mask.coef(c, mean);
      return q;
    }
    return {k[c], k[channels + c], k[2 * channels + c], mask.coef(c, mean)};
  }
  template <int V, int C>
  __device__ __forceinline__ void operator()(int64_t i, const Coef (&cf)[C]) const {
    Vec<T, V> g = load_n<T, V>(dy + i, vec);
    const Vec<T, V> xv = load_n<T, V>(x + i, vec);
    const Vec<T, V> yv = mask.outputs(i, xv, vec);
#pragma unroll
    for (int e = 0; e < V; ++e) {
      const Coef& q = cf[slot<C>(e)];
      const P d = mask.passes_at(xv.v[e], yv.v[e], q.f) ? P(g.v[e]) : P(0);
      g.v[e] = T(d * q.k1 + (P(xv.v[e]) - q.f.m) * q.k2 + q.k3);
    }
    store_n<T, V>(dx + i, g, vec);
  }
};

// No padding in the kernel parameters (StatsOp says why): each size is the sum of its members' 8-byte words.
static_assert(sizeof(StatsOp<float>) == 2 * 8 && sizeof(GradOp<float>) == 10 * 8 && sizeof(AffineOp<float>) == 20 * 8 &&
                  sizeof(BackwardOp<float>) == 21 * 8,
              "a batch-norm op passed to a kernel has padding");

// Planes (inner > 1, inner % V == 0): threadIdx.y and the grid's y across the outer * channels planes (one channel
// lookup per plane and thread), threadIdx.x and the grid's x across the plane's vectors.
template <int V, typename Op>
__global__ void plane_apply(ChannelLayout L, Op op) {
  const int64_t planes = L.outer * L.channels, nvec = L.inner / V;
  const int64_t j0 = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t jstep = static_cast<int64_t>(gridDim.x) * blockDim.x,
                pstep = static_cast<int64_t>(gridDim.y) * blockDim.y;
  if (j0 >= nvec) return;
  for (int64_t p = static_cast<int64_t>(blockIdx.y) * blockDim.y + threadIdx.y; p < planes; p += pstep) {
    const typename Op::Coef cf[1] = {op.coef(p % L.channels, p < L.channels && j0 == 0)};
    for (int64_t j = j0; j < nvec; j += jstep) op.template operator()<V, 1>(p * L.inner + j * V, cf);
  }
}

// Rows (inner == 1, channels % V == 0): threadIdx.x and the grid's y across groups of V channels (coalesced; each
// group's coefficients read once), threadIdx.y and the grid's x across rows.
template <int V, typename Op>
__global__ void row_apply(ChannelLayout L, Op op) {
  const int64_t groups = L.channels / V, gstep = static_cast<int64_t>(gridDim.y) * blockDim.x;
  const int64_t rstep = static_cast<int64_t>(gridDim.x) * blockDim.y;
  for (int64_t gi = static_cast<int64_t>(blockIdx.y) * blockDim.x + threadIdx.x; gi < groups; gi += gstep) {
    typename Op::Coef cf[V];
    const bool first = blockIdx.x == 0 && threadIdx.y == 0;  // the thread of row 0
#pragma unroll
    for (int e = 0; e < V; ++e) cf[e] = op.coef(gi * V + e, first);
    for (int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.y + threadIdx.y; r < L.outer; r += rstep)
      op.template operator()<V, V>(r * L.channels + gi * V, cf);
  }
}

// The smallest power of two >= n, from 32 to kThreads: a block's x extent.
unsigned block_x(int64_t n) {
  unsigned x = 32;
  while (x < static_cast<unsigned>(kThreads) && x < n) x *= 2;
  return x;
}

template <int V, typename Op>
void launch_apply_v(const ChannelLayout& L, Op op, const LaunchScope& ls, const char* what) {
  const bool rows = L.inner == 1;
  const int64_t across = rows ? L.channels / V : L.inner / V, along = rows ? L.outer : L.outer * L.channels;
  const unsigned bx = block_x(across), by = kThreads / bx;
  const int64_t gx = ceil_div(rows ? along : across, rows ? by : bx);
  const int64_t gy = ceil_div(rows ? across : along, rows ? bx : by);
  // As many blocks as the device holds at once, spread over both grid dimensions; the kernels stride over the rest.
  const int64_t budget = std::max<int64_t>(grid_for(gx * gy, ls.device()), 1);
  const int64_t gx1 = std::min(gx, budget), gy1 = std::min<int64_t>({gy, std::max<int64_t>(1, budget / gx1), 65535});
  dim3 grid(static_cast<unsigned>(gx1), static_cast<unsigned>(gy1)), block(bx, by);
  if (rows)
    launch_kernel(TD_KERNEL(row_apply<V, Op>), grid, block, 0, ls.stream(), L, op);
  else
    launch_kernel(TD_KERNEL(plane_apply<V, Op>), grid, block, 0, ls.stream(), L, op);
  TD_CUDA_CHECK_LAUNCH(ls.stream(), what);
}

// Launches op over every element of L, V-wide where vector_width allows.
template <typename T, typename Op>
void launch_apply(const ChannelLayout& L, Op op, const LaunchScope& ls, const char* what) {
  if (L.numel() == 0) return;
  if (vector_width<T>(L) > 1)
    launch_apply_v<vec_width<T>()>(L, op, ls, what);
  else
    launch_apply_v<1>(L, op, ls, what);
}

// Whether every pointer allows 16-byte accesses (null ones do).
bool aligned(std::initializer_list<const void*> ps) {
  for (const void* p : ps)
    if (p != nullptr && !is_aligned(p, 16)) return false;
  return true;
}

unsigned channel_blocks(int64_t channels) { return static_cast<unsigned>(ceil_div(channels, kThreads)); }

// Workspace of `doubles2` double2 values followed by `ts` values of T (all stream-ordered with the call).
template <typename T>
struct Scratch {
  Storage storage;
  double2* partial;
  T* coef;
  Scratch(int64_t doubles2, int64_t ts, const Stream& s)
      : storage(workspace(static_cast<size_t>(doubles2) * sizeof(double2) + static_cast<size_t>(ts) * sizeof(T), s)),
        partial(static_cast<double2*>(storage.data())),
        coef(reinterpret_cast<T*>(partial + doubles2)) {}
};

void check_channels(const BatchNormGeometry& g) {
  TD_CHECK_SHAPE(g.c <= 65535, "batch_norm on CUDA supports at most 65535 channels, got ", g.c);
}

}  // namespace

namespace {

std::atomic<int64_t> fold_limit{kFoldSplits};

// Three launches: the statistics' partial sums in one pass over x, their fixed-order finalize, and the apply with
// the residual and activation fused; two where the apply finalizes (few splits).
void forward_train(const BatchNormTrainArgs& args, const void* residual, BnActivation act, const Stream& s) {
  if (args.g.c == 0) return;
  check_channels(args.g);
  LaunchScope ls(s);
  const ChannelLayout L = layout_of(args.g);
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "batch_norm", {
    using T = scalar_t;
    using P = compute_t<T>;
    const Split sp = split_of(L, vector_width<T>(L));
    const bool vec = aligned({args.x, args.y, residual});
    Scratch<P> scratch(sp.count * args.g.c, 0, s);
    launch_partials<T>(L, sp, StatsOp<T>{static_cast<const T*>(args.x), vec}, scratch.partial, ls.stream());
    StatsFinal<P> stats{scratch.partial,
                        sp.count,
                        args.g.c,
                        static_cast<double>(L.per_channel()),
                        args.eps,
                        args.momentum,
                        static_cast<P*>(args.running_mean),
                        static_cast<P*>(args.running_var),
                        static_cast<P*>(args.save_mean),
                        static_cast<P*>(args.save_invstd)};
    const auto affine_op = [&](auto fold) {
      return AffineOp<T, decltype(fold)::value>{static_cast<const T*>(args.x),
                                                static_cast<const P*>(args.save_mean),
                                                static_cast<const P*>(args.save_invstd),
                                                nullptr,
                                                static_cast<const P*>(args.weight),
                                                static_cast<const P*>(args.bias),
                                                args.eps,
                                                static_cast<const T*>(residual),
                                                static_cast<T*>(args.y),
                                                act,
                                                vec,
                                                stats};
    };
    if (sp.count <= fold_limit.load(std::memory_order_relaxed)) {
      launch_apply<T>(L, affine_op(std::true_type()), ls, "batch_norm apply");
    } else {
      launch_kernel(TD_KERNEL(finalize_stats<P>), channel_blocks(args.g.c), kThreads, 0, ls.stream(), stats);
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "batch_norm finalize_stats");
      launch_apply<T>(L, affine_op(std::false_type()), ls, "batch_norm apply");
    }
  });
}

// One launch: the coefficients from the running statistics in the apply.
void forward_eval(const BatchNormEvalArgs& args, const void* residual, BnActivation act, const Stream& s) {
  if (args.g.c == 0 || args.g.n * args.g.hw == 0) return;
  LaunchScope ls(s);
  const ChannelLayout L = layout_of(args.g);
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "batch_norm", {
    using T = scalar_t;
    using P = compute_t<T>;
    launch_apply<T>(L,
                    AffineOp<T>{static_cast<const T*>(args.x), static_cast<const P*>(args.running_mean), nullptr,
                                static_cast<const P*>(args.running_var), static_cast<const P*>(args.weight),
                                static_cast<const P*>(args.bias), args.eps, static_cast<const T*>(residual),
                                static_cast<T*>(args.y), act, aligned({args.x, args.y, residual}), StatsFinal<P>{}},
                    ls, "batch_norm apply");
  });
}

// The fused backward's extra operands (all null/None for the plain batch norm).
struct ActGrad {
  const void* y;
  BnActivation act;
  bool accumulate;
  void* dres;
  const void* bias;
  bool mask_from_x;
};

// Three launches: the gradient sums in one pass (storing the masked gradient to dres), their finalize, and dx (two
// where the dx pass finalizes: few splits). The mask is recomputed from x where the caller allows it, else read from
// y; dx's pass reads the masked gradient back from dres where the first pass wrote it (rather than added it),
// instead of dy and y.
void backward(const BatchNormBackwardArgs& args, const ActGrad& e, const Stream& s) {
  if (args.g.c == 0) return;
  check_channels(args.g);
  LaunchScope ls(s);
  const ChannelLayout L = layout_of(args.g);
  TD_DISPATCH_FLOAT_BF16(args.g.dtype, "batch_norm backward", {
    using T = scalar_t;
    using P = compute_t<T>;
    const Split sp = split_of(L, vector_width<T>(L));
    const bool vec = aligned({args.x, args.dy, args.dx, e.y, e.dres});
    // Where the dx pass finalizes (few splits), no coefficients are stored between the passes.
    const bool fold = args.dx != nullptr && sp.count <= fold_limit.load(std::memory_order_relaxed);
    Scratch<P> scratch(sp.count * args.g.c, fold ? 0 : 3 * args.g.c, s);
    P* k = scratch.coef;
    const P* m = static_cast<const P*>(args.mean);
    const P* w = static_cast<const P*>(args.weight);
    const P* is = static_cast<const P*>(args.invstd);
    const P* b = static_cast<const P*>(e.bias);
    const T* y = static_cast<const T*>(e.y);
    const MaskFrom mask = e.act == BnActivation::None ? MaskFrom::None : e.mask_from_x ? MaskFrom::X : MaskFrom::Y;
    const auto grad_op = [&](auto from_x) {
      constexpr bool kX = decltype(from_x)::value;
      return GradOp<T, kX>{static_cast<const T*>(args.x),
                           static_cast<const T*>(args.dy),
                           m,
                           static_cast<T*>(e.dres),
                           Mask<T, kX, P>{y, w, is, b, e.act, mask},
                           e.accumulate ? 1 : 0,
                           vec ? 1 : 0};
    };
    if (mask == MaskFrom::X)
      launch_partials<T>(L, sp, grad_op(std::true_type()), scratch.partial, ls.stream());
    else
      launch_partials<T>(L, sp, grad_op(std::false_type()), scratch.partial, ls.stream());
    GradsFinal<P> grads{scratch.partial,
                        sp.count,
                        args.g.c,
                        static_cast<double>(L.per_channel()),
                        args.training ? 1 : 0,
                        w,
                        is,
                        static_cast<P*>(args.dweight),
                        static_cast<P*>(args.dbias)};
    if (!fold) {
      launch_kernel(TD_KERNEL(finalize_grads<P>), channel_blocks(args.g.c), kThreads, 0, ls.stream(), grads, k);
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "batch_norm finalize_grads");
    }
    const bool masked_in_dres = e.dres != nullptr && !e.accumulate;
    const MaskFrom dx_mask = masked_in_dres ? MaskFrom::None : mask;
    const auto backward_op = [&](auto from_x, auto folds) {
      return BackwardOp<T, decltype(from_x)::value, decltype(folds)::value>{
          masked_in_dres ? static_cast<const T*>(e.dres) : static_cast<const T*>(args.dy),
          static_cast<const T*>(args.x),
          m,
          k,
          args.g.c,
          static_cast<T*>(args.dx),
          Mask<T, decltype(from_x)::value, P>{y, w, is, b, e.act, dx_mask},
          vec,
          grads};
    };
    const char* what = "batch_norm apply_backward";
    if (args.dx == nullptr) return;
    if (dx_mask == MaskFrom::X)
      fold ? launch_apply<T>(L, backward_op(std::true_type(), std::true_type()), ls, what)
           : launch_apply<T>(L, backward_op(std::true_type(), std::false_type()), ls, what);
    else
      fold ? launch_apply<T>(L, backward_op(std::false_type(), std::true_type()), ls, what)
           : launch_apply<T>(L, backward_op(std::false_type(), std::false_type()), ls, what);
  });
}

}  // namespace

int64_t set_batch_norm_fold_limit(int64_t splits) { return fold_limit.exchange(splits); }

void CudaNNBackend::batch_norm_forward_train(const BatchNormTrainArgs& args, const Stream& s) {
  forward_train(args, nullptr, BnActivation::None, s);
}
void CudaNNBackend::batch_norm_forward_eval(const BatchNormEvalArgs& args, const Stream& s) {
  forward_eval(args, nullptr, BnActivation::None, s);
}
void CudaNNBackend::batch_norm_backward(const BatchNormBackwardArgs& args, const Stream& s) {
  backward(args, ActGrad{nullptr, BnActivation::None, false, nullptr, nullptr, false}, s);
}
void CudaNNBackend::batch_norm_act_forward_train(const BatchNormActTrainArgs& args, const Stream& s) {
  forward_train(args.bn, args.residual, args.act, s);
}
void CudaNNBackend::batch_norm_act_forward_eval(const BatchNormActEvalArgs& args, const Stream& s) {
  forward_eval(args.bn, args.residual, args.act, s);
}
void CudaNNBackend::batch_norm_act_backward(const BatchNormActBackwardArgs& args, const Stream& s) {
  backward(args.bn, ActGrad{args.y, args.act, args.accumulate_dresidual, args.dresidual, args.bias, args.mask_from_x},
           s);
}

}  // namespace cuda
}  // namespace tandem
