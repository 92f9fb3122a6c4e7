// What the CPU backend's oneDNN paths share: their calls run single-threaded on the calling thread.
#pragma once

#include <cstddef>
#include <cstdint>

namespace tandem {
namespace cpu {

// Makes this thread's oneDNN calls single-threaded (oneDNN sizes its OpenMP regions from the calling thread's
// setting); every thread calls it before its first oneDNN call. Tandem's pool, not OpenMP, spreads the work:
// pieces fixed by the shapes keep results independent of the thread count.
void onednn_single_threaded();

// Scratch of the calling thread in slot `slot` (0 to 5), at least `bytes` long, grown as needed and reused
// across calls, never zero-filled (its users write before they read): oneDNN's reorder buffers in
// conv_onednn.cc (slots 0-5) and the unfolded columns of conv_gemm.cc (slots 0 and 1; the two paths never run
// inside each other).
float* thread_scratch(int slot, size_t bytes);

// f32 C = alpha * op(A) * op(B) + beta * C through oneDNN's GEMM (row-major, as gemm_cpu), in pieces of C
// fixed by the shapes. False, having done nothing, where oneDNN is switched off (cpu_onednn()) or the case is
// degenerate (an empty dimension, alpha 0): gemm_cpu runs it then.
bool onednn_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace cpu
}  // namespace tandem
