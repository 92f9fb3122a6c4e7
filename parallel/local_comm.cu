// The rank-order sum of the collectives on CUDA: one elementwise kernel over up to kMaxSumInputs sources.
#include <cuda_runtime.h>

#include "kernels/cuda/kernel_launch.cuh"
#include "parallel/local_comm.h"
#include "runtime/base/cuda_check.h"

namespace tandem {
namespace parallel {
namespace detail {

namespace {

struct SumSources {
  const void* ptr[kMaxSumInputs];
};

template <typename T>
__global__ void rank_order_sum_kernel(SumSources srcs, int n, T* dst, int64_t count, double scale, bool scaled) {
  using Tr = SumTraits<T>;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < count; i += stride) {
    typename Tr::Acc acc = Tr::load(static_cast<const T*>(srcs.ptr[0])[i]);
    for (int s = 1; s < n; ++s) acc += Tr::load(static_cast<const T*>(srcs.ptr[s])[i]);
    if (scaled) acc = apply_scale(acc, scale);
    dst[i] = Tr::store(acc);
  }
}

template <typename T>
void launch(const SumSources& srcs, int n, void* dst, int64_t count, double scale, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const int64_t blocks = (count + kThreads - 1) / kThreads;
  const int grid = static_cast<int>(blocks < 65535 * 8 ? blocks : 65535 * 8);
  launch_kernel(TD_KERNEL(rank_order_sum_kernel<T>), grid, kThreads, 0, stream, srcs, n, static_cast<T*>(dst), count,
                scale, scale != 1.0);
  TD_CUDA_CHECK_LAUNCH(stream, "rank_order_sum_kernel");
}

}  // namespace

void rank_order_sum_cuda(const void* const* srcs, int n, void* dst, int64_t count, DType dtype, double scale,
                         CUstream_st* stream) {
  TD_CHECK(n >= 1 && n <= kMaxSumInputs, "a CUDA rank-order sum takes 1 to ", kMaxSumInputs, " inputs, not ", n);
  if (count == 0) return;
  SumSources s{};
  for (int i = 0; i < n; ++i) s.ptr[i] = srcs[i];
  switch (dtype) {
    case DType::F32: launch<float>(s, n, dst, count, scale, stream); break;
    case DType::F64: launch<double>(s, n, dst, count, scale, stream); break;
    case DType::F16: launch<F16Bits>(s, n, dst, count, scale, stream); break;
    case DType::BF16: launch<BF16Bits>(s, n, dst, count, scale, stream); break;
    case DType::I32: launch<int32_t>(s, n, dst, count, scale, stream); break;
    case DType::I64: launch<int64_t>(s, n, dst, count, scale, stream); break;
    case DType::U8: launch<uint8_t>(s, n, dst, count, scale, stream); break;
  }
}

}  // namespace detail
}  // namespace parallel
}  // namespace tandem
