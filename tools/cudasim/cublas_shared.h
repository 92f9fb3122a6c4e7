// What the simulated cuBLAS and cuDNN share: TF32 rounding and its override, the stream a handle queues on,
// and the pointer checks of the work they queue.
#pragma once

#include <cuda_runtime_api.h>

#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>
#include <string>
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

// False when NVIDIA_TF32_OVERRIDE=0, which turns TF32 off in every NVIDIA library.
bool tf32_permitted();

// The stream a library handle bound to `device` queues on: `stream` as its SetStream call gave it, where
// nullptr and cudaStreamLegacy are the legacy default stream of the handle's device (not of the device
// current on the calling thread). Null, with *err set, when it cannot take work.
std::shared_ptr<CUstream_st> library_stream(int device, cudaStream_t stream, cudaError_t* err);

// A device buffer that queued work touches, and its name in a fault message.
struct Access {
  const void* ptr;
  size_t bytes;
  std::string what;
};

// Queues `work` on s. Every access is checked now (check_access): when one is refused, a task that faults
// with the reason is queued instead, so that the device gets its sticky error in stream order, as from a
// kernel (simt.cc checks kernel pointers at launch too).
void enqueue_checked(CUstream_st* s, int device, const std::string& what, const std::vector<Access>& accesses,
                     std::function<void()> work);

}  // namespace cudasim
