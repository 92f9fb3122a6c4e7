// Device-side helpers of the CUDA kernels: 16-byte vectors, strided offsets, warp/group reductions, the
// device error flag and the simulated GPU's FLOP count.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>

#include "runtime/base/device_errors.h"
#include "runtime/tensor/backend.h"

namespace tandem {
namespace cuda {

// N elements moved by one memory instruction (16 bytes for N = vec_width<T>()).
template <typename T, int N>
struct alignas(sizeof(T) * N) Vec {
  T v[N];
};
template <typename T>
__host__ __device__ constexpr int vec_width() {
  return static_cast<int>(16 / sizeof(T));
}

template <typename T, int N>
__device__ __forceinline__ Vec<T, N> load_vec(const T* p) {
  return *reinterpret_cast<const Vec<T, N>*>(p);
}
template <typename T, int N>
__device__ __forceinline__ void store_vec(T* p, const Vec<T, N>& v) {
  *reinterpret_cast<Vec<T, N>*>(p) = v;
}

// Offsets (in elements) of the element at row-major position `linear` of `shape` in each operand.
// The dim loops are unrolled over kMaxDims so that the descriptors stay in the kernel's parameter space.
template <typename I, int K>
__device__ __forceinline__ void strided_offsets(I linear, const StridedDesc& shape, const StridedDesc* const (&ds)[K],
                                                I (&off)[K]) {
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] = 0;
#pragma unroll
  for (int d = kMaxDims - 1; d >= 1; --d) {
    if (d < shape.ndim) {
      I size = static_cast<I>(shape.shape[d]);
      I q = linear / size;
      I idx = linear - q * size;
      linear = q;
#pragma unroll
      for (int k = 0; k < K; ++k) off[k] += idx * static_cast<I>(ds[k]->strides[d]);
    }
  }
#pragma unroll
  for (int k = 0; k < K; ++k) off[k] += linear * static_cast<I>(ds[k]->strides[0]);
}

// Butterfly exchange of an accumulator between lanes (overloaded per accumulator type).
__device__ __forceinline__ double shfl_xor(double v, int mask, int width) {
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
__device__ __forceinline__ float shfl_xor(float v, int mask, int width) {
  return __shfl_xor_sync(0xffffffffu, v, mask, width);
}
__device__ __forceinline__ int64_t shfl_xor(int64_t v, int mask, int width) {
  return static_cast<int64_t>(__shfl_xor_sync(0xffffffffu, static_cast<long long>(v), mask, width));
}

// Combines v over the G consecutive threads of each group of a 1-D block (G a power of two dividing
// blockDim.x, itself a multiple of 32 when G > 32). Every lane of the group gets the same result, built in
// a fixed order (butterfly within the warp, then warps in order). Must be reached by all threads of the
// block when G > 32 (it synchronizes); `smem` holds one entry per warp of the block (at most kMaxWarps).
constexpr int kMaxWarps = 32;
template <typename Acc, typename F>
__device__ __forceinline__ Acc group_reduce(Acc v, int G, F combine, Acc* smem) {
  int width = G < 32 ? G : 32;
  for (int mask = width / 2; mask > 0; mask >>= 1) v = combine(v, shfl_xor(v, mask, width));
  if (G <= 32) return v;
  int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
  __syncthreads();  // smem may still be read by a previous call
  if (lane == 0) smem[warp] = v;
  __syncthreads();
  int per_group = G / 32, first = (warp / per_group) * per_group;
  Acc r = smem[first];
  for (int k = 1; k < per_group; ++k) r = combine(r, smem[first + k]);
  return r;
}

// Counts n floating-point operations of the calling thread for the simulated GPU's cost counters (an FMA is
// two); nothing under nvcc.
__device__ __forceinline__ void count_flops(int64_t n) {
#if defined(TANDEM_CUDASIM)
  ::cudasim::simt::count_flops(static_cast<uint64_t>(n));
#else
  (void)n;
#endif
}

// Reports a bad index to the host (raised as IndexError at the next synchronization). A plain store, not an
// atomic (atomics on mapped host memory are not portable): when threads race, one of their codes stays.
__device__ __forceinline__ void flag_error(int32_t* flag, DeviceErrorCode code) {
  volatile int32_t* f = flag;
  if (*f == 0) *f = static_cast<int32_t>(code);
}

}  // namespace cuda
}  // namespace tandem
