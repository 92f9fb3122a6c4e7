// Process-wide numeric switches: TF32 for f32 matrix products and convolutions, deterministic mode, cuDNN's
// algorithm search, Tandem's depthwise kernels, oneDNN behind the CPU backend, and the NaN fill of fresh host
// memory.
#pragma once

namespace tandem {

// TF32 tensor-core math for f32 GEMMs and convolutions on CUDA (on by default; TANDEM_TF32=0 turns it off).
bool allow_tf32();
void set_allow_tf32(bool on);

// Deterministic mode: CUDA picks deterministic cuDNN/cuBLAS algorithms (the CPU always is).
// Off by default; TANDEM_DETERMINISTIC=1 turns it on.
bool deterministic();
void set_deterministic(bool on);

// cuDNN convolution algorithms by timed search (cudnnFind*AlgorithmEx, like PyTorch's cudnn.benchmark: a slow
// first step per shape, sometimes faster kernels) instead of cuDNN's heuristics. Off by default;
// TANDEM_CUDNN_BENCHMARK=1 turns it on.
bool cudnn_benchmark();
void set_cudnn_benchmark(bool on);

// The CUDA backend's depthwise convolutions (groups == in == out channels) in channels-last f32/f64/bf16 with at
// most 9 taps run forward and backward on Tandem's own kernels rather than cuDNN's grouped convolution (on by default;
// TANDEM_DEPTHWISE_KERNELS=0 keeps them on cuDNN, to compare).
bool depthwise_kernels();
void set_depthwise_kernels(bool on);

// The CPU backend runs f32 convolutions through oneDNN (on by default; TANDEM_ONEDNN=0 turns it off, and
// Tandem's own plain kernels, the reference the tests compare oneDNN with, run everything).
bool cpu_onednn();
void set_cpu_onednn(bool on);
// Whether the CPU backend's bf16 convolutions run oneDNN's native bf16 kernels: oneDNN is on, the processor has
// AVX512-BF16, and they are not switched off (TANDEM_NATIVE_BF16=0, or set_cpu_native_bf16(false): the results
// of a processor without them). Otherwise they compute in f32 on widened copies, with the same rounding points
// (the sums in another order).
bool cpu_native_bf16();
void set_cpu_native_bf16(bool on);

// Whether fresh host storages are filled with 0xff bytes (NaN in every floating dtype, -1 in the integer ones)
// so that reading memory an op never wrote shows, as the simulated GPU does with device memory (the host cache
// would otherwise hand back a block holding a previous run's right answer). TANDEM_FILL_FRESH=1 at start (the
// test suite sets it), or set_fill_fresh_host_memory. Off by default: it costs a pass over each allocation.
bool fill_fresh_host_memory();
void set_fill_fresh_host_memory(bool on);

}  // namespace tandem
