// CPU GEMM: packed panels and a register-blocked micro-kernel (AVX2+FMA when the CPU has it).
// Every element of C is summed in the same order however the work is split over threads. CpuBackend::gemm runs
// f32 through oneDNN (onednn.h) unless it is switched off; gemm_cpu stays the reference.
#include <immintrin.h>

#include <algorithm>
#include <vector>

#include "kernels/cpu/cpu_backend.h"
#include "kernels/cpu/onednn.h"
#include "kernels/dispatch.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {
constexpr int64_t kMR = 6;     // rows of a micro-tile
constexpr int64_t kKC = 256;   // depth of a packed block
constexpr int64_t kNC = 2048;  // columns of a packed block

template <typename T>
constexpr int64_t nr() {
  return 64 / sizeof(T);
}  // 16 floats or 8 doubles

bool has_avx2_fma() {
  static const bool ok = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return ok;
}

// Element (i, j) of op(X), X row-major with leading dim ld.
template <typename T>
inline T at(const T* x, int64_t ld, bool trans, int64_t i, int64_t j) {
  return trans ? x[j * ld + i] : x[i * ld + j];
}

// acc[MR][NR] = sum_p a[p][0..MR) * b[p][0..NR) over kc steps.
template <typename T>
void micro_generic(int64_t kc, const T* a, const T* b, T* acc) {
  constexpr int64_t NR = nr<T>();
  for (int64_t i = 0; i < kMR * NR; ++i) acc[i] = T(0);
  for (int64_t p = 0; p < kc; ++p)
    for (int64_t r = 0; r < kMR; ++r) {
      T av = a[p * kMR + r];
      for (int64_t c = 0; c < NR; ++c) acc[r * NR + c] += av * b[p * NR + c];
    }
}

__attribute__((target("avx2,fma"))) void micro_avx2(int64_t kc, const float* a, const float* b, float* acc) {
  __m256 c[kMR][2];
  for (int r = 0; r < kMR; ++r) c[r][0] = c[r][1] = _mm256_setzero_ps();
  for (int64_t p = 0; p < kc; ++p) {
    __m256 b0 = _mm256_loadu_ps(b + p * 16), b1 = _mm256_loadu_ps(b + p * 16 + 8);
    for (int r = 0; r < kMR; ++r) {
      __m256 av = _mm256_broadcast_ss(a + p * kMR + r);
      c[r][0] = _mm256_fmadd_ps(av, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_ps(av, b1, c[r][1]);
    }
  }
  for (int r = 0; r < kMR; ++r) {
    _mm256_storeu_ps(acc + r * 16, c[r][0]);
    _mm256_storeu_ps(acc + r * 16 + 8, c[r][1]);
  }
}

__attribute__((target("avx2,fma"))) void micro_avx2(int64_t kc, const double* a, const double* b, double* acc) {
  __m256d c[kMR][2];
  for (int r = 0; r < kMR; ++r) c[r][0] = c[r][1] = _mm256_setzero_pd();
  for (int64_t p = 0; p < kc; ++p) {
    __m256d b0 = _mm256_loadu_pd(b + p * 8), b1 = _mm256_loadu_pd(b + p * 8 + 4);
    for (int r = 0; r < kMR; ++r) {
      __m256d av = _mm256_broadcast_sd(a + p * kMR + r);
      c[r][0] = _mm256_fmadd_pd(av, b0, c[r][0]);
      c[r][1] = _mm256_fmadd_pd(av, b1, c[r][1]);
    }
  }
  for (int r = 0; r < kMR; ++r) {
    _mm256_storeu_pd(acc + r * 8, c[r][0]);
    _mm256_storeu_pd(acc + r * 8 + 4, c[r][1]);
  }
}
}  // namespace

template <typename T>
void gemm_cpu(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, T alpha, const T* a, int64_t lda, const T* b,
              int64_t ldb, T beta, T* c, int64_t ldc) {
  constexpr int64_t NR = nr<T>();
  // C = beta * C first (beta = 0 overwrites, so NaNs in C do not survive).
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) c[i * ldc + j] = beta == T(0) ? T(0) : beta * c[i * ldc + j];
  if (k == 0 || alpha == T(0)) return;
  const bool fast = has_avx2_fma();
  int64_t m_panels = (m + kMR - 1) / kMR;
  std::vector<T> apack, bpack;
  for (int64_t jc = 0; jc < n; jc += kNC) {
    int64_t nc = std::min(kNC, n - jc);
    int64_t n_panels = (nc + NR - 1) / NR;
    for (int64_t pc = 0; pc < k; pc += kKC) {
      int64_t kc = std::min(kKC, k - pc);
      // Pack op(B)[pc:pc+kc, jc:jc+nc] as panels of NR columns, zero-padded.
      bpack.assign(static_cast<size_t>(n_panels * kc * NR), T(0));
      parallel_for(0, n_panels, 4, [&](int64_t lo, int64_t hi) {
        for (int64_t jp = lo; jp < hi; ++jp)
          for (int64_t p = 0; p < kc; ++p)
            for (int64_t cc = 0; cc < NR && jp * NR + cc < nc; ++cc)
              bpack[(jp * kc + p) * NR + cc] = at(b, ldb, trans_b, pc + p, jc + jp * NR + cc);
      });
      // Pack op(A)[:, pc:pc+kc] as panels of MR rows, zero-padded.
      apack.assign(static_cast<size_t>(m_panels * kc * kMR), T(0));
      parallel_for(0, m_panels, 4, [&](int64_t lo, int64_t hi) {
        for (int64_t ip = lo; ip < hi; ++ip)
          for (int64_t p = 0; p < kc; ++p)
            for (int64_t r = 0; r < kMR && ip * kMR + r < m; ++r)
              apack[(ip * kc + p) * kMR + r] = at(a, lda, trans_a, ip * kMR + r, pc + p);
      });
      // Each micro-tile of C belongs to one thread.
      parallel_for(0, m_panels * n_panels, 8, [&](int64_t lo, int64_t hi) {
        T acc[kMR * NR];
        for (int64_t tile = lo; tile < hi; ++tile) {
          int64_t ip = tile / n_panels, jp = tile % n_panels;
          const T* ap = apack.data() + ip * kc * kMR;
          const T* bp = bpack.data() + jp * kc * NR;
          if (fast)
            micro_avx2(kc, ap, bp, acc);
          else
            micro_generic(kc, ap, bp, acc);
          int64_t rows = std::min(kMR, m - ip * kMR), cols = std::min(NR, nc - jp * NR);
          for (int64_t r = 0; r < rows; ++r) {
            T* crow = c + (ip * kMR + r) * ldc + jc + jp * NR;
            for (int64_t cc = 0; cc < cols; ++cc) crow[cc] += alpha * acc[r * NR + cc];
          }
        }
      });
    }
  }
}

template void gemm_cpu<float>(bool, bool, int64_t, int64_t, int64_t, float, const float*, int64_t, const float*,
                              int64_t, float, float*, int64_t);
template void gemm_cpu<double>(bool, bool, int64_t, int64_t, int64_t, double, const double*, int64_t, const double*,
                               int64_t, double, double*, int64_t);

void CpuBackend::gemm(const GemmArgs& args, const Stream&) {
  if (args.t == DType::F32) {
    const float* af = static_cast<const float*>(args.a);
    const float* bf = static_cast<const float*>(args.b);
    float* cf = static_cast<float*>(args.c);
    bool all = true;  // the first matrix finds oneDNN off or the case degenerate, or none does
    for (int64_t i = 0; i < args.batch && all; ++i)
      all = onednn_gemm(args.trans_a, args.trans_b, args.m, args.n, args.k, static_cast<float>(args.alpha),
                        af + i * args.stride_a, args.lda, bf + i * args.stride_b, args.ldb,
                        static_cast<float>(args.beta), cf + i * args.stride_c, args.ldc);
    if (all) return;
  }
  TD_DISPATCH_FLOAT(args.t, "gemm", {
    for (int64_t i = 0; i < args.batch; ++i)
      gemm_cpu<scalar_t>(args.trans_a, args.trans_b, args.m, args.n, args.k, static_cast<scalar_t>(args.alpha),
                         static_cast<const scalar_t*>(args.a) + i * args.stride_a, args.lda,
                         static_cast<const scalar_t*>(args.b) + i * args.stride_b, args.ldb,
                         static_cast<scalar_t>(args.beta), static_cast<scalar_t*>(args.c) + i * args.stride_c,
                         args.ldc);
  });
}

}  // namespace cpu
}  // namespace tandem
