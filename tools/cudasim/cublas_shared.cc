// What the simulated cuBLAS and cuDNN share (see cublas_shared.h).
#include "tools/cudasim/cublas_shared.h"

#include <cstdlib>

namespace cudasim {

bool tf32_permitted() {
  static const bool on = [] {
    const char* v = std::getenv("NVIDIA_TF32_OVERRIDE");
    return v == nullptr || std::strcmp(v, "0") != 0;
  }();
  return on;
}

std::shared_ptr<CUstream_st> library_stream(int device, cudaStream_t stream, cudaError_t* err) {
  // resolve_stream takes nullptr as the current device's legacy stream: make the handle's device current.
  const int saved = current_device();
  set_current_device(device);
  CUstream_st* s = resolve_stream(stream, err);
  set_current_device(saved);
  return s != nullptr ? stream_ref(s) : nullptr;
}

void enqueue_checked(CUstream_st* s, int device, const std::string& what, const std::vector<Access>& accesses,
                     std::function<void()> work) {
  // Checked when queued rather than when run: the allocation registry follows host calls, not stream order,
  // so a pool block freed and allocated again on this stream before the work runs would show its new size.
  for (const Access& a : accesses) {
    if (a.bytes == 0) continue;
    try {
      check_access(device, a.ptr, a.bytes, a.what);
    } catch (const Fault& f) {
      enqueue(s, what, [f] { throw f; });
      return;
    }
  }
  enqueue(s, what, std::move(work));
}

}  // namespace cudasim
