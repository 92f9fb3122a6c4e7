// TD_CUBLAS_CHECK: turns a failed cuBLAS call into a BackendError carrying cuBLAS's description of the status.
#pragma once

#include <cublas_v2.h>

#include "runtime/base/cuda_check.h"

namespace tandem {
namespace detail {
[[noreturn]] void raise_cublas(cublasStatus_t status, const char* expr, const char* file, int line);
}  // namespace detail
}  // namespace tandem

#define TD_CUBLAS_CHECK(expr) TD_STATUS_CHECK(expr, #expr, CUBLAS_STATUS_SUCCESS, ::tandem::detail::raise_cublas)
