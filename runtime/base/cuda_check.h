// TD_CUDA_CHECK and TD_CUDA_CHECK_LAUNCH: turn CUDA runtime errors into BackendError with the error text (and
// TD_STATUS_CHECK, the status check that the CUDA libraries' macros share).
#pragma once

#include <cuda_runtime_api.h>

#include "runtime/base/error.h"

namespace tandem {
// Whether every op synchronizes its stream and checks for errors (set_sync_debug or TANDEM_SYNC_DEBUG=1).
bool sync_debug();
void set_sync_debug(bool on);

// For a CUDA call whose failure cannot be thrown (a destructor, cleanup on an error path): says on stderr what
// failed and clears the thread's last error, so that the next check does not blame an unrelated call or kernel
// for it. A sticky error (a lost context) stays: every later call reports it anyway.
void ignore_cuda_error(cudaError_t err, const char* what);

namespace detail {
[[noreturn]] void raise_cuda(cudaError_t err, const char* expr, const char* file, int line);
// After a kernel launch: check the launch error, and under sync_debug also wait for the stream.
void check_launch(cudaStream_t stream, const char* what, const char* file, int line);
}  // namespace detail
}  // namespace tandem

// TD_STATUS_CHECK(expr, text, ok, raise_fn): for a call of the CUDA runtime or a CUDA library (cuBLAS, cuDNN, NCCL)
// that returns a status: raise_fn(status, text, file, line) when expr's status is not ok. Each library's check macro
// passes text as #expr, so that the message shows the call as written.
#define TD_STATUS_CHECK(expr, text, ok, raise_fn)                           \
  do {                                                                      \
    const auto td_status_ = (expr);                                         \
    if (td_status_ != (ok)) raise_fn(td_status_, text, __FILE__, __LINE__); \
  } while (0)

#define TD_CUDA_CHECK(expr) TD_STATUS_CHECK(expr, #expr, cudaSuccess, ::tandem::detail::raise_cuda)

// Call right after every kernel launch.
#define TD_CUDA_CHECK_LAUNCH(stream, what) ::tandem::detail::check_launch((stream), (what), __FILE__, __LINE__)
