// Process-wide numeric switches: TF32 for f32 matrix products and convolutions, and deterministic mode.
#pragma once

namespace tandem {

// TF32 tensor-core math for f32 GEMMs and convolutions on CUDA (on by default; TANDEM_TF32=0 turns it off).
bool allow_tf32();
void set_allow_tf32(bool on);

// Deterministic mode: CUDA picks deterministic cuDNN/cuBLAS algorithms (the CPU always is).
// Off by default; TANDEM_DETERMINISTIC=1 turns it on.
bool deterministic();
void set_deterministic(bool on);

}  // namespace tandem
