// TD_HOST_DEVICE: marks functions that compile for both the host and CUDA kernels.
#pragma once

#if defined(__CUDACC__)
#define TD_HOST_DEVICE __host__ __device__ __forceinline__
#else
#define TD_HOST_DEVICE inline
#endif
