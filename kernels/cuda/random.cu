// CUDA Philox random fills, bit-identical to kernels/cpu/random.cc (same helpers from runtime/base/philox.h, in
// the same order).
#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/dispatch.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/philox.h"

namespace tandem {
namespace cuda {

namespace {
// Value w of Philox block `b`, exactly as the CPU computes it.
template <typename T>
__device__ __forceinline__ T random_value(const philox::Block& b, int w, const RandomSpec& spec) {
  return philox::sample<T>(b, w, spec.normal, spec.a, spec.b);
}

// One thread per Philox block of 4 values: out[4 * blk + w] = value w of counter offset + blk.
template <typename T>
__global__ void random_kernel(T* out, int64_t n, uint64_t seed, uint64_t offset, RandomSpec spec, bool vec) {
  const int64_t blocks = (n + 3) / 4;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t blk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; blk < blocks; blk += step) {
    const philox::Block b = philox::generate(seed, offset + static_cast<uint64_t>(blk));
    if (vec && blk * 4 + 4 <= n) {
      Vec<T, 4> v;
#pragma unroll
      for (int w = 0; w < 4; ++w) v.v[w] = random_value<T>(b, w, spec);
      store_vec<T, 4>(out + blk * 4, v);
    } else {
      for (int w = 0; w < 4 && blk * 4 + w < n; ++w) out[blk * 4 + w] = random_value<T>(b, w, spec);
    }
  }
}
}  // namespace

void CudaBackend::random(const RandomArgs& args, const Stream& s) {
  if (args.n <= 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(args.t, "random", {
    const bool vec = is_aligned(args.out, 4 * sizeof(scalar_t));
    launch_kernel(TD_KERNEL(random_kernel<scalar_t>), grid_for(ceil_div(ceil_div(args.n, 4), kThreads), ls.device()),
                  kThreads, 0, ls.stream(), static_cast<scalar_t*>(args.out), args.n, args.seed, args.offset, args.spec,
                  vec);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "random_kernel");
  });
}

}  // namespace cuda
}  // namespace tandem
