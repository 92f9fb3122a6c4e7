// The SIMT header of the simulated GPU: included first (g++ -include) into every .cu file of the simulated
// build, it makes CUDA kernel code plain C++ run by the simulator's fibers: the CUDA keywords, the thread
// coordinates, __syncthreads, the warp collectives, bit casts, and the launch that replaces <<<>>>.
#pragma once

// Defined before NVIDIA's headers so that they keep these (they define them only when undefined on the host).
#undef __global__
#define __global__
#undef __device__
#define __device__
#undef __host__
#define __host__
#undef __grid_constant__
#define __grid_constant__
#undef __shared__
#define __shared__ static thread_local

#include <cuda_runtime.h>
#include <device_launch_parameters.h>

#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <new>
#include <tuple>
#include <type_traits>
#include <utility>

// NVIDIA's headers redefine these unconditionally.
#undef __forceinline__
#define __forceinline__ inline
#undef __launch_bounds__
#define __launch_bounds__(...)
#undef __constant__
#define __constant__ static

namespace cudasim {
namespace simt {

// The coordinates of the simulated thread that runs now on this host thread.
struct Coords {
  uint3 thread;
  uint3 block;
  dim3 block_dim;
  dim3 grid_dim;
};
extern thread_local const Coords* tl_coords __attribute__((tls_model("initial-exec")));

// Block-wide barrier; every thread of the block must reach the same one.
void barrier(const char* file, int line);

enum class WarpOp : int { ShflIdx, ShflUp, ShflDown, ShflXor, Ballot, Any, All, SyncWarp };
// A warp collective with PTX shfl.sync / vote.sync / bar.warp.sync semantics: every thread named in `mask`
// must reach it with the same op and mask. Returns the calling thread's result.
uint64_t warp(WarpOp op, unsigned mask, uint64_t value, int arg, int width, const char* file, int line);

template <typename T>
uint64_t to_bits(T v) {
  static_assert(sizeof(T) <= 8 && std::is_trivially_copyable<T>::value, "warp collectives move up to 8 bytes");
  uint64_t bits = 0;
  std::memcpy(&bits, &v, sizeof(T));
  return bits;
}
template <typename T>
T from_bits(uint64_t bits) {
  T v;
  std::memcpy(&v, &bits, sizeof(T));
  return v;
}

// A kernel and its parameters, copied at launch as CUDA copies them into the parameter space.
struct Closure {
  void (*run)(Closure* self);
  void (*destroy)(Closure* self);
  const void* params;
  size_t params_bytes;
};
// Queues a kernel on `stream` (takes the closure). Invalid configurations are reported as a GPU reports them:
// cudaGetLastError after the launch names the kernel, file and line. `function` identifies the kernel (what
// cudaFuncGetAttributes is given): its first launch on a device loads it there, which waits for the device.
void launch(const char* kernel, const char* file, int line, const void* function, dim3 grid, dim3 block,
            size_t shared_bytes, cudaStream_t stream, Closure* closure);

}  // namespace simt

template <typename... P, typename... A>
void launch_kernel(const char* kernel, const char* file, int line, void (*fn)(P...), dim3 grid, dim3 block,
                   size_t shared_bytes, cudaStream_t stream, A&&... args) {
  using Params = std::tuple<std::decay_t<P>...>;
  struct Launch : simt::Closure {
    void (*fn)(P...);
    Params args;
  };
  // Zeroed memory: padding between parameters stays zero, so the simulator's scan of the parameters for
  // device pointers sees only real values.
  void* mem = std::calloc(1, sizeof(Launch));
  if (mem == nullptr) throw std::bad_alloc();
  Launch* c = new (mem) Launch{{nullptr, nullptr, nullptr, 0}, fn, Params(std::forward<A>(args)...)};
  c->params = &c->args;
  c->params_bytes = sizeof(Params);
  c->run = [](simt::Closure* self) {
    Launch* l = static_cast<Launch*>(self);
    std::apply(l->fn, l->args);
  };
  c->destroy = [](simt::Closure* self) {
    Launch* l = static_cast<Launch*>(self);
    l->~Launch();
    std::free(l);
  };
  simt::launch(kernel, file, line, reinterpret_cast<const void*>(fn), grid, block, shared_bytes, stream, c);
}

}  // namespace cudasim

#define threadIdx (::cudasim::simt::tl_coords->thread)
#define blockIdx (::cudasim::simt::tl_coords->block)
#define blockDim (::cudasim::simt::tl_coords->block_dim)
#define gridDim (::cudasim::simt::tl_coords->grid_dim)
#define warpSize 32

inline void __syncthreads(const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cudasim::simt::barrier(file, line);
}
inline void __syncwarp(unsigned mask = 0xffffffffu, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  ::cudasim::simt::warp(::cudasim::simt::WarpOp::SyncWarp, mask, 0, 0, 32, file, line);
}

#define CUDASIM_SHFL(NAME, OP, ARG)                                                                 \
  template <typename T>                                                                             \
  inline T NAME(unsigned mask, T var, ARG, int width = 32, const char* file = __builtin_FILE(),     \
                int line = __builtin_LINE()) {                                                      \
    return ::cudasim::simt::from_bits<T>(::cudasim::simt::warp(                                     \
        ::cudasim::simt::WarpOp::OP, mask, ::cudasim::simt::to_bits(var), arg, width, file, line)); \
  }
CUDASIM_SHFL(__shfl_sync, ShflIdx, int arg)
CUDASIM_SHFL(__shfl_up_sync, ShflUp, unsigned arg)
CUDASIM_SHFL(__shfl_down_sync, ShflDown, unsigned arg)
CUDASIM_SHFL(__shfl_xor_sync, ShflXor, int arg)
#undef CUDASIM_SHFL

inline unsigned __ballot_sync(unsigned mask, int pred, const char* file = __builtin_FILE(),
                              int line = __builtin_LINE()) {
  return static_cast<unsigned>(
      ::cudasim::simt::warp(::cudasim::simt::WarpOp::Ballot, mask, pred != 0, 0, 32, file, line));
}
inline int __any_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(::cudasim::simt::warp(::cudasim::simt::WarpOp::Any, mask, pred != 0, 0, 32, file, line));
}
inline int __all_sync(unsigned mask, int pred, const char* file = __builtin_FILE(), int line = __builtin_LINE()) {
  return static_cast<int>(::cudasim::simt::warp(::cudasim::simt::WarpOp::All, mask, pred != 0, 0, 32, file, line));
}

// Bit casts and read-only loads (plain C++ on the host).
inline float __int_as_float(int x) { return ::cudasim::simt::from_bits<float>(static_cast<uint32_t>(x)); }
inline int __float_as_int(float x) { return static_cast<int>(::cudasim::simt::to_bits(x)); }
inline float __uint_as_float(unsigned x) { return ::cudasim::simt::from_bits<float>(x); }
inline unsigned __float_as_uint(float x) { return static_cast<unsigned>(::cudasim::simt::to_bits(x)); }
inline double __longlong_as_double(long long x) { return ::cudasim::simt::from_bits<double>(static_cast<uint64_t>(x)); }
inline long long __double_as_longlong(double x) { return static_cast<long long>(::cudasim::simt::to_bits(x)); }
template <typename T>
inline T __ldg(const T* p) {
  return *p;
}

// CUDA's device math is in the global namespace, min and max included (for mixed integer types they
// compare in the common type, as CUDA's overloads do).
using std::isfinite;
using std::isinf;
using std::isnan;
template <typename A, typename B>
inline std::common_type_t<A, B> min(A a, B b) {
  using T = std::common_type_t<A, B>;
  return static_cast<T>(b) < static_cast<T>(a) ? static_cast<T>(b) : static_cast<T>(a);
}
template <typename A, typename B>
inline std::common_type_t<A, B> max(A a, B b) {
  using T = std::common_type_t<A, B>;
  return static_cast<T>(a) < static_cast<T>(b) ? static_cast<T>(b) : static_cast<T>(a);
}
