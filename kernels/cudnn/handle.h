// One cuDNN handle per (thread, CUDA device), made when the thread is prepared (prepare_cuda_thread) and pooled
// for later threads when it ends (kernels/thread_handles.h).
#pragma once

#include <cudnn.h>

namespace tandem {

// The calling thread's handle for CUDA device `device`, bound to `stream`. The CUDA runtime's current
// device must be `device`.
cudnnHandle_t cudnn_handle(int device, cudaStream_t stream);

}  // namespace tandem
