// TD_CUDNN_CHECK: turns a failed cuDNN call into a BackendError carrying cuDNN's description of the status.
#pragma once

#include <cudnn.h>

#include "runtime/base/cuda_check.h"

namespace tandem {
namespace detail {
[[noreturn]] void raise_cudnn(cudnnStatus_t status, const char* expr, const char* file, int line);
}  // namespace detail
}  // namespace tandem

#define TD_CUDNN_CHECK(expr) TD_STATUS_CHECK(expr, #expr, CUDNN_STATUS_SUCCESS, ::tandem::detail::raise_cudnn)
