// What the simulated cuBLAS and cuDNN share: TF32 rounding and its override, the double-precision matrix
// product their arithmetic runs on, the live handles and descriptors, the checks of handle creation and stream
// binding, and the stream a handle queues on.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <type_traits>
#include <vector>

#include "tools/cudasim/sim.h"
#include "tools/cudasim/state.h"

namespace cudasim {

// Keeps float's 8-bit exponent and the top 10 of its 23 mantissa bits, rounding to nearest with ties away
// from zero (PTX's cvt.rna.tf32.f32); infinities and NaNs pass unchanged.
inline float round_tf32(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if ((u & 0x7f800000u) == 0x7f800000u) return f;
  u = (u + 0x1000u) & 0xffffe000u;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}

// An input as the arithmetic reads it: in double, through TF32 first when `tf32` and the data is float.
template <typename T>
double widen(T v, bool tf32) {
  if constexpr (std::is_same<T, float>::value) {
    if (tf32) return round_tf32(v);
  }
  return v;
}

// C (M x N, row stride ldc) += A (M x K, rows of stride lda) times the transpose of B (N x K, rows of stride
// ldb): each element a dot product summed in double in order of l, so results do not depend on blocking.
void gemm_nt(int64_t M, int64_t N, int64_t K, const double* A, int64_t lda, const double* B, int64_t ldb, double* C,
             int64_t ldc);

// False when NVIDIA_TF32_OVERRIDE=0, which turns TF32 off in every NVIDIA library.
bool tf32_permitted();

// The live objects of type T (handles, descriptors), so that a destroyed or never created one is refused. Never
// freed: calls may come from thread-exit destructors after static destruction.
template <typename T>
class Live {
 public:
  static Live& of() {
    static auto* l = new Live();
    return *l;
  }
  void add(const T* t) {
    std::lock_guard<std::mutex> lock(mu_);
    objects_.insert(t);
  }
  // False when `t` was not live.
  bool remove(const T* t) {
    std::lock_guard<std::mutex> lock(mu_);
    return objects_.erase(t) != 0;
  }
  bool contains(const T* t) {
    std::lock_guard<std::mutex> lock(mu_);
    return t != nullptr && objects_.count(t) != 0;
  }

 private:
  std::mutex mu_;
  std::set<const T*> objects_;
};

// For cublasCreate and cudnnCreate (`api`): reserves `bytes` for a handle on the current device, whose number goes
// to *device, once every stream of the device is idle (wait_device_idle: the library loads its module). Returns ""
// or why it cannot: the device cannot be used or that wait timed out (*unusable), or it has not the bytes left.
std::string reserve_handle(const char* api, size_t bytes, int* device, bool* unusable);

// For cublasSetStream and cudnnSetStream (`api`): "" when `stream` (nullptr and cudaStreamLegacy: the legacy
// default stream) can be bound to a handle of `device`, else why not; *other_device: the stream belongs to another
// device (else it cannot be used).
std::string check_handle_stream(const char* api, cudaStream_t stream, int device, bool* other_device);

// The stream a library handle bound to `device` queues on: `stream` as its SetStream call gave it, where
// nullptr and cudaStreamLegacy are the legacy default stream of the handle's device (not of the device
// current on the calling thread). Null, with *err set, when it cannot take work.
std::shared_ptr<CUstream_st> library_stream(int device, cudaStream_t stream, cudaError_t* err);

}  // namespace cudasim
