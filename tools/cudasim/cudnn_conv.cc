// Convolution on the CPU for the simulated cuDNN, as the GEMMs an implicit-GEMM kernel performs: a slab of
// images is unfolded (im2col) into double rows of filter-sized patches, rounded to TF32 first when asked,
// multiplied in double by a register-blocked kernel, and written back with alpha and beta in the data type
// (bf16 through float).
#include "tools/cudasim/cudnn_conv.h"

#include <algorithm>
#include <atomic>
#include <numeric>
#include <random>
#include <type_traits>
#include <vector>

#include "tools/cudasim/cublas_shared.h"

namespace cudasim {
namespace cudnn {

namespace {

// Partial sums of a non-deterministic algorithm: enough for the order of their additions to matter.
constexpr int kChunks = 4;
// Doubles of unfolded input per slab of images (8 MiB): large enough to batch small images, small enough
// for big ones.
constexpr int64_t kSlabElements = int64_t{1} << 20;

// ---- data movement ----

// *p = alpha * result + beta * *p, cuDNN's rule. With beta != 0 the result is first what the kernel's accumulators
// hold (f32 for f32 and bf16 data, f64 for f64), so alpha = beta = 1 adds the f32 result to the prior in one
// rounding (double rounding through double is exact for a sum of two floats): a separate add's value.
template <typename T>
void store(T* p, double v, double alpha, double beta) {
  if (beta == 0) {
    *p = narrow<T>(alpha * v);
    return;
  }
  const double result = static_cast<accumulator_t<T>>(v);
  *p = narrow<T>(alpha * result + beta * widen(*p, false));
}

// The geometry shared by the passes: one group's patch is Cg x R x S; rows are output positions (n, p, q).
struct Shape {
  int C, H, W, K, Cg, Kg, R, S, P, Q;
  int64_t patch, positions;  // Cg * R * S, P * Q
  explicit Shape(const Conv& c)
      : C(c.x.c),
        H(c.x.h),
        W(c.x.w),
        K(c.w.n),
        Cg(c.w.c),
        Kg(c.w.n / c.groups),
        R(c.w.h),
        S(c.w.w),
        P(c.y.h),
        Q(c.y.w),
        patch(int64_t{c.w.c} * c.w.h * c.w.w),
        positions(int64_t{c.y.h} * c.y.w) {}
  // Images per slab, so that a slab's unfolded input stays near kSlabElements.
  int slab(int N) const { return static_cast<int>(std::clamp<int64_t>(kSlabElements / (positions * patch), 1, N)); }
};

// Calls f(row, patch index, n, channel in the group, h, w) for every tap of images [n0, n1) that lies
// inside the input (the others read the zero padding).
template <typename F>
void for_each_tap(const Conv& c, const Shape& s, int n0, int n1, F f) {
  int64_t row = 0;
  for (int n = n0; n < n1; ++n)
    for (int p = 0; p < s.P; ++p)
      for (int q = 0; q < s.Q; ++q, ++row)
        for (int cc = 0; cc < s.Cg; ++cc)
          for (int r = 0; r < s.R; ++r) {
            const int h = p * c.stride_h - c.pad_h + r * c.dil_h;
            if (h < 0 || h >= s.H) continue;
            for (int t = 0; t < s.S; ++t) {
              const int w = q * c.stride_w - c.pad_w + t * c.dil_w;
              if (w < 0 || w >= s.W) continue;
              f(row, (int64_t{cc} * s.R + r) * s.S + t, n, cc, h, w);
            }
          }
}

// Unfolds images [n0, n1) of group g: col[row * row_stride + k * k_stride] for patch index k (zero padding).
template <typename T>
void im2col(const Conv& c, const Shape& s, const T* x, int n0, int n1, int g, bool tf32, double* col,
            int64_t row_stride, int64_t k_stride) {
  std::fill(col, col + (n1 - n0) * s.positions * s.patch, 0.0);
  const T* xg = x + int64_t{g} * s.Cg * c.x.sc;
  for_each_tap(c, s, n0, n1, [&](int64_t row, int64_t k, int n, int cc, int h, int w) {
    col[row * row_stride + k * k_stride] = widen(xg[n * c.x.sn + cc * c.x.sc + h * c.x.sh + w * c.x.sw], tf32);
  });
}

// The filter of group g as out[k][patch] (transposed: out[patch][k]), rotated when the mode is
// CUDNN_CONVOLUTION so that every pass computes a cross-correlation.
template <typename T>
void gather_filter(const Conv& c, const Shape& s, const T* w, int g, bool tf32, bool transposed, double* out) {
  const Dims& d = c.w;
  for (int k = 0; k < s.Kg; ++k)
    for (int cc = 0; cc < s.Cg; ++cc)
      for (int r = 0; r < s.R; ++r)
        for (int t = 0; t < s.S; ++t) {
          const int rr = c.flip ? s.R - 1 - r : r, tt = c.flip ? s.S - 1 - t : t;
          const int64_t e = (int64_t{cc} * s.R + r) * s.S + t;
          out[transposed ? e * s.Kg + k : k * s.patch + e] =
              widen(w[(int64_t{g} * s.Kg + k) * d.sn + cc * d.sc + rr * d.sh + tt * d.sw], tf32);
        }
}

// The rows of dy of images [n0, n1) and group g, as out[k * k_stride + row * row_stride].
template <typename T>
void gather_dy(const Conv& c, const Shape& s, const T* dy, int n0, int n1, int g, bool tf32, double* out,
               int64_t k_stride, int64_t row_stride) {
  int64_t row = 0;
  for (int n = n0; n < n1; ++n)
    for (int p = 0; p < s.P; ++p)
      for (int q = 0; q < s.Q; ++q, ++row)
        for (int k = 0; k < s.Kg; ++k)
          out[k * k_stride + row * row_stride] =
              widen(dy[n * c.y.sn + (int64_t{g} * s.Kg + k) * c.y.sc + p * c.y.sh + q * c.y.sw], tf32);
}

// A different order of additions on every call (and for every element) of a non-deterministic algorithm.
struct Rng {
  uint64_t state;
  Rng() {
    static const uint64_t base = (static_cast<uint64_t>(std::random_device{}()) << 32) ^ std::random_device{}();
    static std::atomic<uint64_t> calls{0};
    state = base ^ (++calls * 0x9e3779b97f4a7c15ull);
  }
  uint64_t next() {  // splitmix64
    uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
};

// Element e of `chunks` partial-sum planes of `count` elements: the one sum, or the partials rounded to the
// accumulator type (T; f32 for bf16) and added in it in a random order.
template <typename T>
double combine(const std::vector<double>& acc, size_t count, int chunks, size_t e, Rng& rng) {
  using A = accumulator_t<T>;
  if (chunks == 1) return acc[e];
  int order[kChunks];
  std::iota(order, order + chunks, 0);
  for (int i = chunks - 1; i > 0; --i) std::swap(order[i], order[rng.next() % static_cast<uint64_t>(i + 1)]);
  A sum = static_cast<A>(acc[order[0] * count + e]);
  for (int i = 1; i < chunks; ++i) sum = static_cast<A>(sum + static_cast<A>(acc[order[i] * count + e]));
  return sum;
}

// ---- the passes ----

// y[k][row] = sum over the patch of w[k][patch] col[row][patch].
template <typename T>
void forward_t(const Conv& c, const Numerics& m, double alpha, const T* x, const T* w, double beta, T* y) {
  const Shape s(c);
  const int N = c.x.n, slab = s.slab(N);
  std::vector<double> wg(static_cast<size_t>(s.Kg * s.patch)), col, out;
  for (int g = 0; g < c.groups; ++g) {
    gather_filter(c, s, w, g, m.tf32, false, wg.data());
    for (int n0 = 0; n0 < N; n0 += slab) {
      const int n1 = std::min(N, n0 + slab);
      const int64_t rows = (n1 - n0) * s.positions;
      col.resize(static_cast<size_t>(rows * s.patch));
      out.assign(static_cast<size_t>(s.Kg * rows), 0.0);
      im2col(c, s, x, n0, n1, g, m.tf32, col.data(), s.patch, 1);
      cudasim::gemm_nt(s.Kg, rows, s.patch, wg.data(), s.patch, col.data(), s.patch, out.data(), rows);
      for (int k = 0; k < s.Kg; ++k) {
        const double* o = out.data() + k * rows;
        for (int n = n0; n < n1; ++n)
          for (int p = 0; p < s.P; ++p)
            for (int q = 0; q < s.Q; ++q, ++o)
              store(y + n * c.y.sn + (int64_t{g} * s.Kg + k) * c.y.sc + p * c.y.sh + q * c.y.sw, *o, alpha, beta);
      }
    }
  }
}

// dcol[row][patch] = sum over k of dy[row][k] w[k][patch], folded back (col2im) into dx. A non-deterministic
// algorithm sums chunks of output channels separately: their atomic adds meet in dx.
template <typename T>
void backward_data_t(const Conv& c, const Numerics& m, double alpha, const T* w, const T* dy, double beta, T* dx) {
  const Shape s(c);
  const int N = c.x.n, slab = s.slab(N);
  const int chunks = m.unordered ? std::min(kChunks, s.Kg) : 1;
  const int64_t plane = int64_t{s.H} * s.W, image = s.Cg * plane;
  std::vector<double> wt(static_cast<size_t>(s.patch * s.Kg)), dyt, dcol, acc;
  Rng rng;
  for (int g = 0; g < c.groups; ++g) {
    gather_filter(c, s, w, g, m.tf32, true, wt.data());
    for (int n0 = 0; n0 < N; n0 += slab) {
      const int n1 = std::min(N, n0 + slab);
      const int64_t rows = (n1 - n0) * s.positions, count = (n1 - n0) * image;
      dyt.resize(static_cast<size_t>(rows * s.Kg));
      dcol.resize(static_cast<size_t>(rows * s.patch));
      acc.assign(static_cast<size_t>(chunks * count), 0.0);
      gather_dy(c, s, dy, n0, n1, g, m.tf32, dyt.data(), 1, s.Kg);
      for (int j = 0; j < chunks; ++j) {
        const int k0 = j * s.Kg / chunks, k1 = (j + 1) * s.Kg / chunks;
        std::fill(dcol.begin(), dcol.end(), 0.0);
        cudasim::gemm_nt(rows, s.patch, k1 - k0, dyt.data() + k0, s.Kg, wt.data() + k0, s.Kg, dcol.data(), s.patch);
        double* a = acc.data() + j * count;
        for_each_tap(c, s, n0, n1, [&](int64_t row, int64_t k, int n, int cc, int h, int x) {
          a[(n - n0) * image + cc * plane + h * s.W + x] += dcol[row * s.patch + k];
        });
      }
      size_t e = 0;
      for (int n = n0; n < n1; ++n)
        for (int cc = 0; cc < s.Cg; ++cc)
          for (int h = 0; h < s.H; ++h)
            for (int x = 0; x < s.W; ++x, ++e)
              store(dx + n * c.x.sn + (int64_t{g} * s.Cg + cc) * c.x.sc + h * c.x.sh + x * c.x.sw,
                    combine<T>(acc, static_cast<size_t>(count), chunks, e, rng), alpha, beta);
    }
  }
}

// dw[k][patch] = sum over rows of dy[k][row] col[row][patch]. A non-deterministic algorithm sums chunks of
// rows separately: their atomic adds meet in dw.
template <typename T>
void backward_filter_t(const Conv& c, const Numerics& m, double alpha, const T* x, const T* dy, double beta, T* dw) {
  const Shape s(c);
  const int N = c.x.n, slab = s.slab(N);
  const int chunks = m.unordered ? static_cast<int>(std::min<int64_t>(kChunks, N * s.positions)) : 1;
  const int64_t count = s.Kg * s.patch;
  std::vector<double> colt, dyg, acc;
  Rng rng;
  for (int g = 0; g < c.groups; ++g) {
    acc.assign(static_cast<size_t>(chunks * count), 0.0);
    for (int n0 = 0; n0 < N; n0 += slab) {
      const int n1 = std::min(N, n0 + slab);
      const int64_t rows = (n1 - n0) * s.positions;
      colt.resize(static_cast<size_t>(s.patch * rows));
      dyg.resize(static_cast<size_t>(s.Kg * rows));
      im2col(c, s, x, n0, n1, g, m.tf32, colt.data(), 1, rows);
      gather_dy(c, s, dy, n0, n1, g, m.tf32, dyg.data(), rows, 1);
      for (int j = 0; j < chunks; ++j) {
        const int64_t r0 = j * rows / chunks, r1 = (j + 1) * rows / chunks;
        cudasim::gemm_nt(s.Kg, s.patch, r1 - r0, dyg.data() + r0, rows, colt.data() + r0, rows, acc.data() + j * count,
                         s.patch);
      }
    }
    size_t e = 0;
    for (int k = 0; k < s.Kg; ++k)
      for (int cc = 0; cc < s.Cg; ++cc)
        for (int r = 0; r < s.R; ++r)
          for (int t = 0; t < s.S; ++t, ++e) {
            const int rr = c.flip ? s.R - 1 - r : r, tt = c.flip ? s.S - 1 - t : t;
            store(dw + (int64_t{g} * s.Kg + k) * c.w.sn + cc * c.w.sc + rr * c.w.sh + tt * c.w.sw,
                  combine<T>(acc, static_cast<size_t>(count), chunks, e, rng), alpha, beta);
          }
  }
}

template <typename T>
void add_t(double alpha, const Dims& a, const T* A, double beta, const Dims& c, T* C) {
  // A size of 1 broadcasts: its index stays 0.
  const int64_t an = a.n == 1 ? 0 : a.sn, ac = a.c == 1 ? 0 : a.sc, ah = a.h == 1 ? 0 : a.sh, aw = a.w == 1 ? 0 : a.sw;
  for (int n = 0; n < c.n; ++n)
    for (int ch = 0; ch < c.c; ++ch)
      for (int h = 0; h < c.h; ++h)
        for (int w = 0; w < c.w; ++w)
          store(C + n * c.sn + ch * c.sc + h * c.sh + w * c.sw, widen(A[n * an + ch * ac + h * ah + w * aw], false),
                alpha, beta);
}

}  // namespace

size_t extent_bytes(const Dims& d, size_t element_bytes) {
  if (d.n <= 0 || d.c <= 0 || d.h <= 0 || d.w <= 0) return 0;
  const int64_t last = (d.n - 1) * d.sn + (d.c - 1) * d.sc + (d.h - 1) * d.sh + (d.w - 1) * d.sw;
  return static_cast<size_t>(last + 1) * element_bytes;
}

// Calls f with a null pointer of c's element type (double, Bf16 or float).
template <typename F>
void with_element(const Conv& c, F f) {
  if (c.f64)
    f(static_cast<double*>(nullptr));
  else if (c.bf16)
    f(static_cast<Bf16*>(nullptr));
  else
    f(static_cast<float*>(nullptr));
}

void forward(const Conv& c, const Numerics& m, double alpha, const void* x, const void* w, double beta, void* y) {
  with_element(c, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    forward_t(c, m, alpha, static_cast<const T*>(x), static_cast<const T*>(w), beta, static_cast<T*>(y));
  });
}

void backward_data(const Conv& c, const Numerics& m, double alpha, const void* w, const void* dy, double beta,
                   void* dx) {
  with_element(c, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    backward_data_t(c, m, alpha, static_cast<const T*>(w), static_cast<const T*>(dy), beta, static_cast<T*>(dx));
  });
}

void backward_filter(const Conv& c, const Numerics& m, double alpha, const void* x, const void* dy, double beta,
                     void* dw) {
  with_element(c, [&](auto* t) {
    using T = std::remove_pointer_t<decltype(t)>;
    backward_filter_t(c, m, alpha, static_cast<const T*>(x), static_cast<const T*>(dy), beta, static_cast<T*>(dw));
  });
}

void add_tensor(bool f64, double alpha, const Dims& a, const void* A, double beta, const Dims& c, void* C) {
  if (f64)
    add_t(alpha, a, static_cast<const double*>(A), beta, c, static_cast<double*>(C));
  else
    add_t(alpha, a, static_cast<const float*>(A), beta, c, static_cast<float*>(C));
}

}  // namespace cudnn
}  // namespace cudasim
