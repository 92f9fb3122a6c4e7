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

// The calling thread's scratch buffers, by use. The GEMM convolution (conv_gemm.cc) and oneDNN's
// (conv_onednn.cc) never run inside each other, so the GEMM's two buffers share oneDNN's first two slots.
enum class ScratchSlot {
  first_input = 0,      // conv_onednn.cc: a primitive's first input, reordered to its layout
  second_input = 1,     // conv_onednn.cc: its second input, reordered to its layout
  columns = 0,          // conv_gemm.cc: a chunk's unfolded input (or its gradient)
  output_matrix = 1,    // conv_gemm.cc: a chunk's output (or its gradient) as a matrix
  output = 2,           // conv_onednn.cc: a primitive's output in its layout, before the reorder to the caller's
  primitive = 3,        // conv_onednn.cc: a primitive's own scratchpad
  shared_weights = 4,   // conv_onednn.cc: the weights, reordered once for every piece of a call
  piece_gradients = 5,  // conv_onednn.cc: one weight gradient per piece, summed in piece order
};
constexpr int kScratchSlots = 6;

// The calling thread's scratch in `slot`, at least `bytes` long, grown as needed and reused across calls, never
// zero-filled (its users write before they read).
float* thread_scratch(ScratchSlot slot, size_t bytes);

// f32 C = alpha * op(A) * op(B) + beta * C through oneDNN's GEMM (row-major, as gemm_cpu), in pieces of C
// fixed by the shapes. False, having done nothing, where oneDNN is switched off (cpu_onednn()) or the case is
// degenerate (an empty dimension, alpha 0): gemm_cpu runs it then.
bool onednn_gemm(bool trans_a, bool trans_b, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t lda,
                 const float* b, int64_t ldb, float beta, float* c, int64_t ldc);

}  // namespace cpu
}  // namespace tandem
