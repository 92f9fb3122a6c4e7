// CUDA error reporting and the synchronize-after-every-op debug switch.
#include "runtime/base/cuda_check.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

namespace tandem {
namespace {
std::atomic<bool>& sync_debug_flag() {
  static std::atomic<bool> flag([] {
    const char* v = std::getenv("TANDEM_SYNC_DEBUG");
    return v != nullptr && std::strcmp(v, "0") != 0 && v[0] != '\0';
  }());
  return flag;
}
}  // namespace

bool sync_debug() { return sync_debug_flag().load(std::memory_order_relaxed); }
void set_sync_debug(bool on) { sync_debug_flag().store(on); }

void ignore_cuda_error(cudaError_t err, const char* what) {
  if (err == cudaSuccess) return;
  std::fprintf(stderr, "tandem: %s failed (ignored here): %s: %s\n", what, cudaGetErrorName(err),
               cudaGetErrorString(err));
  cudaGetLastError();
}

namespace detail {
void raise_cuda(cudaError_t err, const char* expr, const char* file, int line) {
  // The call also left `err` as the thread's last error: this exception reports it, so it must not be reported
  // again by the next launch check (against an unrelated kernel) when the exception is caught.
  cudaGetLastError();
  std::string msg = std::string("CUDA error ") + cudaGetErrorName(err) + ": " + cudaGetErrorString(err);
  throw BackendError(msg, expr, file, line);
}

void check_launch(cudaStream_t stream, const char* what, const char* file, int line) {
  cudaError_t err = cudaGetLastError();
  if (err != cudaSuccess) {
    throw BackendError(
        std::string("kernel launch of ") + what + " failed: " + cudaGetErrorName(err) + ": " + cudaGetErrorString(err),
        what, file, line);
  }
  if (sync_debug()) {
    err = cudaStreamSynchronize(stream);
    if (err != cudaSuccess) {
      throw BackendError(std::string("kernel ") + what + " failed (found by TANDEM_SYNC_DEBUG): " +
                             cudaGetErrorName(err) + ": " + cudaGetErrorString(err),
                         what, file, line);
    }
  }
}
}  // namespace detail
}  // namespace tandem
