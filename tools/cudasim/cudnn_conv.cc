// Direct convolution on the CPU for the simulated cuDNN. Operands are gathered image by image into contiguous
// double planes (rounded to TF32 first when asked), so that the inner loops run over contiguous rows whatever
// the tensors' layout, summed in double, and written back with alpha and beta in the data type.
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

int64_t floor_div(int64_t a, int64_t b) { return a >= 0 ? a / b : -((-a + b - 1) / b); }
int64_t ceil_div(int64_t a, int64_t b) { return -floor_div(-a, b); }

// The output positions o in [lo, hi) whose input position o * stride - pad + offset lies in [0, n_in).
struct Range {
  int lo = 0, hi = 0;
};
Range valid(int n_in, int n_out, int stride, int pad, int offset) {
  int64_t lo = std::max<int64_t>(ceil_div(pad - offset, stride), 0);
  int64_t hi = std::min<int64_t>(floor_div(int64_t{n_in} - 1 + pad - offset, stride) + 1, n_out);
  return Range{static_cast<int>(lo), static_cast<int>(std::max(lo, hi))};
}

template <typename T>
double load(T v, bool tf32) {
  if constexpr (std::is_same<T, float>::value) {
    if (tf32) return round_tf32(v);
  }
  return v;
}

template <typename T>
void store(T* p, double v, double alpha, double beta) {
  double r = alpha * v;
  if (beta != 0) r += beta * static_cast<double>(*p);
  *p = static_cast<T>(r);
}

// Image n of tensor d as out[c][h][w].
template <typename T>
void gather(const T* base, const Dims& d, int n, bool tf32, double* out) {
  const T* img = base + n * d.sn;
  for (int c = 0; c < d.c; ++c)
    for (int h = 0; h < d.h; ++h)
      for (int w = 0; w < d.w; ++w) *out++ = load(img[c * d.sc + h * d.sh + w * d.sw], tf32);
}

// The whole filter as out[k][c][r][s], rotated when the mode is CUDNN_CONVOLUTION, so that every pass
// below is a cross-correlation.
template <typename T>
std::vector<double> gather_filter(const T* w, const Dims& d, bool flip, bool tf32) {
  std::vector<double> out(static_cast<size_t>(d.n) * d.c * d.h * d.w);
  size_t i = 0;
  for (int k = 0; k < d.n; ++k)
    for (int c = 0; c < d.c; ++c)
      for (int r = 0; r < d.h; ++r)
        for (int s = 0; s < d.w; ++s) {
          const int rr = flip ? d.h - 1 - r : r, ss = flip ? d.w - 1 - s : s;
          out[i++] = load(w[k * d.sn + c * d.sc + rr * d.sh + ss * d.sw], tf32);
        }
  return out;
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

// Element e of `chunks` partial-sum planes of `count` elements: the one sum, or the partials rounded to T
// and added in T in a random order.
template <typename T>
double combine(const std::vector<double>& acc, size_t count, int chunks, size_t e, Rng& rng) {
  if (chunks == 1) return acc[e];
  int order[kChunks];
  std::iota(order, order + chunks, 0);
  for (int i = chunks - 1; i > 0; --i) std::swap(order[i], order[rng.next() % static_cast<uint64_t>(i + 1)]);
  T sum = static_cast<T>(acc[order[0] * count + e]);
  for (int i = 1; i < chunks; ++i) sum = static_cast<T>(sum + static_cast<T>(acc[order[i] * count + e]));
  return sum;
}

struct Taps {
  std::vector<Range> p, q;  // per filter row r and column s: the output rows and columns it reaches
  Taps(const Conv& c) : p(static_cast<size_t>(c.w.h)), q(static_cast<size_t>(c.w.w)) {
    for (int r = 0; r < c.w.h; ++r) p[r] = valid(c.x.h, c.y.h, c.stride_h, c.pad_h, r * c.dil_h);
    for (int s = 0; s < c.w.w; ++s) q[s] = valid(c.x.w, c.y.w, c.stride_w, c.pad_w, s * c.dil_w);
  }
};

template <typename T>
void forward_t(const Conv& c, const Numerics& m, double alpha, const T* x, const T* w, double beta, T* y) {
  const int C = c.x.c, H = c.x.h, W = c.x.w, K = c.w.n, Cg = c.w.c, R = c.w.h, S = c.w.w, P = c.y.h, Q = c.y.w;
  const int Kg = K / c.groups, u = c.stride_h, v = c.stride_w;
  const std::vector<double> wd = gather_filter(w, c.w, c.flip, m.tf32);
  const Taps taps(c);
  std::vector<double> xn(static_cast<size_t>(C) * H * W), acc(static_cast<size_t>(P) * Q);
  for (int n = 0; n < c.x.n; ++n) {
    gather(x, c.x, n, m.tf32, xn.data());
    for (int k = 0; k < K; ++k) {
      const int g = k / Kg;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int cc = 0; cc < Cg; ++cc) {
        const double* xp = xn.data() + static_cast<size_t>(g * Cg + cc) * H * W;
        const double* wp = wd.data() + static_cast<size_t>(k * Cg + cc) * R * S;
        for (int r = 0; r < R; ++r) {
          for (int s = 0; s < S; ++s) {
            const double wv = wp[r * S + s];
            const Range qs = taps.q[s];
            for (int p = taps.p[r].lo; p < taps.p[r].hi; ++p) {
              const int64_t base = int64_t{p * u - c.pad_h + r * c.dil_h} * W - c.pad_w + s * c.dil_w;
              double* ar = acc.data() + static_cast<size_t>(p) * Q;
              if (v == 1) {
                for (int q = qs.lo; q < qs.hi; ++q) ar[q] += wv * xp[base + q];
              } else {
                for (int q = qs.lo; q < qs.hi; ++q) ar[q] += wv * xp[base + int64_t{q} * v];
              }
            }
          }
        }
      }
      T* yk = y + n * c.y.sn + k * c.y.sc;
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q)
          store(yk + p * c.y.sh + q * c.y.sw, acc[static_cast<size_t>(p) * Q + q], alpha, beta);
    }
  }
}

template <typename T>
void backward_data_t(const Conv& c, const Numerics& m, double alpha, const T* w, const T* dy, double beta, T* dx) {
  const int C = c.x.c, H = c.x.h, W = c.x.w, K = c.w.n, Cg = c.w.c, R = c.w.h, S = c.w.w, P = c.y.h, Q = c.y.w;
  const int Kg = K / c.groups, u = c.stride_h, v = c.stride_w;
  // The atomics of a non-deterministic algorithm come from different output channels adding into one dx.
  const int chunks = m.unordered ? std::min(kChunks, Kg) : 1;
  const size_t plane = static_cast<size_t>(H) * W;
  const std::vector<double> wd = gather_filter(w, c.w, c.flip, m.tf32);
  const Taps taps(c);
  std::vector<double> dyn(static_cast<size_t>(K) * P * Q), acc(chunks * plane);
  Rng rng;
  for (int n = 0; n < c.x.n; ++n) {
    gather(dy, c.y, n, m.tf32, dyn.data());
    for (int ci = 0; ci < C; ++ci) {
      const int g = ci / Cg, cc = ci % Cg;
      std::fill(acc.begin(), acc.end(), 0.0);
      for (int kk = 0; kk < Kg; ++kk) {
        const int k = g * Kg + kk;
        double* a = acc.data() + static_cast<size_t>(kk * chunks / Kg) * plane;
        const double* dyp = dyn.data() + static_cast<size_t>(k) * P * Q;
        const double* wp = wd.data() + static_cast<size_t>(k * Cg + cc) * R * S;
        for (int r = 0; r < R; ++r) {
          for (int s = 0; s < S; ++s) {
            const double wv = wp[r * S + s];
            const Range qs = taps.q[s];
            for (int p = taps.p[r].lo; p < taps.p[r].hi; ++p) {
              const int64_t base = int64_t{p * u - c.pad_h + r * c.dil_h} * W - c.pad_w + s * c.dil_w;
              const double* dr = dyp + static_cast<size_t>(p) * Q;
              if (v == 1) {
                for (int q = qs.lo; q < qs.hi; ++q) a[base + q] += wv * dr[q];
              } else {
                for (int q = qs.lo; q < qs.hi; ++q) a[base + int64_t{q} * v] += wv * dr[q];
              }
            }
          }
        }
      }
      T* out = dx + n * c.x.sn + ci * c.x.sc;
      for (int h = 0; h < H; ++h)
        for (int col = 0; col < W; ++col)
          store(out + h * c.x.sh + col * c.x.sw, combine<T>(acc, plane, chunks, static_cast<size_t>(h) * W + col, rng),
                alpha, beta);
    }
  }
}

template <typename T>
void backward_filter_t(const Conv& c, const Numerics& m, double alpha, const T* x, const T* dy, double beta, T* dw) {
  const int N = c.x.n, C = c.x.c, H = c.x.h, W = c.x.w, K = c.w.n, Cg = c.w.c, R = c.w.h, S = c.w.w, P = c.y.h,
            Q = c.y.w;
  const int Kg = K / c.groups, u = c.stride_h, v = c.stride_w;
  // The atomics of a non-deterministic algorithm come from different output rows adding into one dw.
  const int64_t rows = int64_t{N} * P;
  const int chunks = m.unordered ? static_cast<int>(std::min<int64_t>(kChunks, rows)) : 1;
  const size_t count = static_cast<size_t>(K) * Cg * R * S;
  const Taps taps(c);
  std::vector<double> xn(static_cast<size_t>(C) * H * W), dyn(static_cast<size_t>(K) * P * Q), acc(chunks * count);
  for (int n = 0; n < N; ++n) {
    gather(x, c.x, n, m.tf32, xn.data());
    gather(dy, c.y, n, m.tf32, dyn.data());
    for (int k = 0; k < K; ++k) {
      const int g = k / Kg;
      const double* dyp = dyn.data() + static_cast<size_t>(k) * P * Q;
      for (int cc = 0; cc < Cg; ++cc) {
        const double* xp = xn.data() + static_cast<size_t>(g * Cg + cc) * H * W;
        const size_t e0 = static_cast<size_t>(k * Cg + cc) * R * S;
        for (int r = 0; r < R; ++r) {
          for (int s = 0; s < S; ++s) {
            const Range qs = taps.q[s];
            for (int p = taps.p[r].lo; p < taps.p[r].hi; ++p) {
              const int64_t base = int64_t{p * u - c.pad_h + r * c.dil_h} * W - c.pad_w + s * c.dil_w;
              const double* dr = dyp + static_cast<size_t>(p) * Q;
              double sum = 0;
              if (v == 1) {
                for (int q = qs.lo; q < qs.hi; ++q) sum += dr[q] * xp[base + q];
              } else {
                for (int q = qs.lo; q < qs.hi; ++q) sum += dr[q] * xp[base + int64_t{q} * v];
              }
              const size_t chunk = static_cast<size_t>((int64_t{n} * P + p) * chunks / rows);
              acc[chunk * count + e0 + static_cast<size_t>(r) * S + s] += sum;
            }
          }
        }
      }
    }
  }
  Rng rng;
  size_t e = 0;
  for (int k = 0; k < K; ++k)
    for (int cc = 0; cc < Cg; ++cc)
      for (int r = 0; r < R; ++r)
        for (int s = 0; s < S; ++s, ++e) {
          const int rr = c.flip ? R - 1 - r : r, ss = c.flip ? S - 1 - s : s;
          store(dw + k * c.w.sn + cc * c.w.sc + rr * c.w.sh + ss * c.w.sw, combine<T>(acc, count, chunks, e, rng),
                alpha, beta);
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
          store(C + n * c.sn + ch * c.sc + h * c.sh + w * c.sw,
                static_cast<double>(A[n * an + ch * ac + h * ah + w * aw]), alpha, beta);
}

}  // namespace

size_t extent_bytes(const Dims& d, size_t element_bytes) {
  if (d.n <= 0 || d.c <= 0 || d.h <= 0 || d.w <= 0) return 0;
  const int64_t last = (d.n - 1) * d.sn + (d.c - 1) * d.sc + (d.h - 1) * d.sh + (d.w - 1) * d.sw;
  return static_cast<size_t>(last + 1) * element_bytes;
}

void forward(const Conv& c, const Numerics& m, double alpha, const void* x, const void* w, double beta, void* y) {
  if (c.f64)
    forward_t(c, m, alpha, static_cast<const double*>(x), static_cast<const double*>(w), beta, static_cast<double*>(y));
  else
    forward_t(c, m, alpha, static_cast<const float*>(x), static_cast<const float*>(w), beta, static_cast<float*>(y));
}

void backward_data(const Conv& c, const Numerics& m, double alpha, const void* w, const void* dy, double beta,
                   void* dx) {
  if (c.f64)
    backward_data_t(c, m, alpha, static_cast<const double*>(w), static_cast<const double*>(dy), beta,
                    static_cast<double*>(dx));
  else
    backward_data_t(c, m, alpha, static_cast<const float*>(w), static_cast<const float*>(dy), beta,
                    static_cast<float*>(dx));
}

void backward_filter(const Conv& c, const Numerics& m, double alpha, const void* x, const void* dy, double beta,
                     void* dw) {
  if (c.f64)
    backward_filter_t(c, m, alpha, static_cast<const double*>(x), static_cast<const double*>(dy), beta,
                      static_cast<double*>(dw));
  else
    backward_filter_t(c, m, alpha, static_cast<const float*>(x), static_cast<const float*>(dy), beta,
                      static_cast<float*>(dw));
}

void add_tensor(bool f64, double alpha, const Dims& a, const void* A, double beta, const Dims& c, void* C) {
  if (f64)
    add_t(alpha, a, static_cast<const double*>(A), beta, c, static_cast<double*>(C));
  else
    add_t(alpha, a, static_cast<const float*>(A), beta, c, static_cast<float*>(C));
}

}  // namespace cudnn
}  // namespace cudasim
