// One cuBLAS handle per (thread, CUDA device), made when the thread is prepared (prepare_cuda_thread) and pooled
// for later threads when it ends (kernels/thread_handles.h).
#pragma once

#include <cublas_v2.h>

namespace tandem {

// The calling thread's handle for CUDA device `device`, bound to `stream`. The CUDA runtime's current
// device must be `device` (the backend holds a DeviceGuard).
cublasHandle_t cublas_handle(int device, cudaStream_t stream);

}  // namespace tandem
