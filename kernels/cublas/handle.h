// One cuBLAS handle per (thread, CUDA device), created on first use and destroyed when the thread exits.
#pragma once

#include <cublas_v2.h>

namespace tandem {

// The calling thread's handle for CUDA device `device`, bound to `stream`. The CUDA runtime's current
// device must be `device` (the backend holds a DeviceGuard).
cublasHandle_t cublas_handle(int device, cudaStream_t stream);

}  // namespace tandem
