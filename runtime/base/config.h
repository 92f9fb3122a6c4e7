// Process-wide numeric switches: TF32 for f32 matrix products and convolutions, deterministic mode, and
// oneDNN behind the CPU backend.
#pragma once

namespace tandem {

// TF32 tensor-core math for f32 GEMMs and convolutions on CUDA (on by default; TANDEM_TF32=0 turns it off).
bool allow_tf32();
void set_allow_tf32(bool on);

// Deterministic mode: CUDA picks deterministic cuDNN/cuBLAS algorithms (the CPU always is).
// Off by default; TANDEM_DETERMINISTIC=1 turns it on.
bool deterministic();
void set_deterministic(bool on);

// The CPU backend runs f32 convolutions through oneDNN (on by default; TANDEM_ONEDNN=0 turns it off, and
// Tandem's own plain kernels, the reference the tests compare oneDNN with, run everything).
bool cpu_onednn();
void set_cpu_onednn(bool on);

}  // namespace tandem
