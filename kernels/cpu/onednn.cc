// oneDNN's single-threaded calls and its f32 GEMM behind the CPU backend.
// Why oneDNN's GEMM: its AVX-512 kernels, measured on the model zoo's fully connected layers, beat gemm_cpu's
// AVX2 panels, whose packing of a transposed B (x W^T) strides through memory.
#include "kernels/cpu/onednn.h"

#include <omp.h>

#include <dnnl.h>
#include <algorithm>
#include <memory>

#include "runtime/base/config.h"
#include "runtime/base/error.h"
#include "runtime/base/parallel_for.h"

namespace tandem {
namespace cpu {

namespace {
// C is split into two pieces (rows or columns, whichever are more) from this many multiply-adds.
constexpr int64_t kSplitWork = 1 << 20;
}  // namespace

float* thread_scratch(ScratchSlot slot, size_t bytes) {
  struct Buffer {
    std::unique_ptr<float[]> data;
    size_t floats = 0;
  };
  thread_local Buffer bufs[kScratchSlots];
  const int i = static_cast<int>(slot);
  TD_ASSERT(i >= 0 && i < kScratchSlots, "thread_scratch: slot ", i, " is not 0 to ", kScratchSlots - 1);
  Buffer& b = bufs[i];
  const size_t need = (bytes + sizeof(float) - 1) / sizeof(float);
  if (need > b.floats) b.data.reset(new float[need]), b.floats = need;
  return b.data.get();
}

void onednn_single_threaded() {
  thread_local bool done = false;
  if (!done) {
    omp_set_num_threads(1);
    done = true;
  }
}

bool onednn_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc) {
  if (!cpu_onednn() || m == 0 || n == 0 || k == 0 || alpha == 0.f) return false;
  // beta = 0 overwrites C, NaNs included, as gemm_cpu does.
  if (beta == 0.f)
    for (int64_t i = 0; i < m; ++i) std::fill(c + i * ldc, c + i * ldc + n, 0.f);
  const bool split = m * n * k >= kSplitWork && std::max(m, n) >= 2;
  const bool by_rows = m >= n;
  const int64_t total = by_rows ? m : n, per = split ? (total + 1) / 2 : total;
  parallel_for(0, (total + per - 1) / per, 1, [&](int64_t lo, int64_t hi) {
    onednn_single_threaded();
    for (int64_t piece = lo; piece < hi; ++piece) {
      const int64_t i0 = piece * per, cnt = std::min(per, total - i0);
      // Rows of C come from rows of op(A); columns of C from columns of op(B).
      const float* ap = by_rows ? a + (trans_a ? i0 : i0 * lda) : a;
      const float* bp = by_rows ? b : b + (trans_b ? i0 * ldb : i0);
      float* cp = by_rows ? c + i0 * ldc : c + i0;
      dnnl_status_t st = dnnl_sgemm(trans_a ? 'T' : 'N', trans_b ? 'T' : 'N', by_rows ? cnt : m, by_rows ? n : cnt, k,
                                    alpha, ap, lda, bp, ldb, beta, cp, ldc);
      TD_CHECK_T(BackendError, st == dnnl_success, "oneDNN's sgemm failed with status ", static_cast<int>(st));
    }
  });
  return true;
}

}  // namespace cpu
}  // namespace tandem
