// One cuDNN handle per (thread, CUDA device), created on first use and destroyed when the thread exits.
#pragma once

#include <cudnn.h>

namespace tandem {

// The calling thread's handle for CUDA device `device`, bound to `stream`. The CUDA runtime's current
// device must be `device`.
cudnnHandle_t cudnn_handle(int device, cudaStream_t stream);

}  // namespace tandem
