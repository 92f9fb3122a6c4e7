// CUDA dropout (Philox masks bit-identical to the CPU's) and the fused optimizer steps: one launch updates a
// whole list of tensors, whose pointers and sizes travel in the kernel's parameters (up to kListTensors per
// launch), each block updating one chunk of one tensor.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/cuda/nn/cuda_nn_backend.h"
#include "kernels/dispatch.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/philox.h"

namespace tandem {
namespace cuda {

namespace {

__global__ void dropout_mask_kernel(int64_t n, double p, uint64_t seed, uint64_t base, const uint64_t* delta,
                                    uint8_t* mask) {
  const int64_t blocks = (n + 3) / 4, step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  const uint64_t offset = delta != nullptr ? base + *delta : base;
  for (int64_t blk = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; blk < blocks; blk += step) {
    const philox::Block b = philox::generate(seed, offset + static_cast<uint64_t>(blk));
    for (int w = 0; w < 4 && blk * 4 + w < n; ++w) mask[blk * 4 + w] = philox::uniform32(b.x[w]) >= p ? 1 : 0;
  }
}

template <typename T>
__global__ void masked_scale_kernel(const T* x, const uint8_t* mask, compute_t<T> scale, T* y, int64_t n) {
  using C = compute_t<T>;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step)
    y[i] = T(mask[i] ? C(x[i]) * scale : C(0));
}

// Tensors of one launch: K pointer lists, sizes, and the first block of each tensor.
constexpr int kListTensors = 192;
constexpr int64_t kChunk = 8192;  // elements per block
template <int K>
struct TensorList {
  void* ptr[K][kListTensors];
  int64_t numel[kListTensors];
  int64_t first_block[kListTensors];
  int count;
};

// The tensor whose chunks include this block: the last t with first_block[t] <= blockIdx.x.
__device__ __forceinline__ int tensor_of_block(const int64_t* first_block, int count) {
  int lo = 0, hi = count - 1;
  const int64_t b = blockIdx.x;
  while (lo < hi) {
    int mid = (lo + hi + 1) / 2;
    if (first_block[mid] <= b)
      lo = mid;
    else
      hi = mid - 1;
  }
  return lo;
}

template <typename T>
struct SgdCoef {
  T lr, momentum, damp, wd;
  bool use_wd, use_momentum, nesterov, first;
  const double* device_lr;  // when set, the learning rate (CUDA graphs)
};

template <typename T>
__global__ void sgd_kernel(const __grid_constant__ TensorList<3> list, SgdCoef<T> k) {
  const int t = tensor_of_block(list.first_block, list.count);
  T* p = static_cast<T*>(list.ptr[0][t]);
  const T* g = static_cast<const T*>(list.ptr[1][t]);
  T* buf = static_cast<T*>(list.ptr[2][t]);
  const T lr = k.device_lr != nullptr ? static_cast<T>(*k.device_lr) : k.lr;
  const int64_t start = (static_cast<int64_t>(blockIdx.x) - list.first_block[t]) * kChunk;
  const int64_t end = min(list.numel[t], start + kChunk);
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    T d = g[i];
    if (k.use_wd) d += k.wd * p[i];
    if (k.use_momentum) {
      const T b = k.first ? d : k.momentum * buf[i] + k.damp * d;
      buf[i] = b;
      d = k.nesterov ? d + k.momentum * b : b;
    }
    p[i] -= lr * d;
  }
}

template <typename T>
struct AdamCoef {
  T b1, b2, one_b1, one_b2, eps, wd, step_size, bc2, decay;
  bool coupled, decoupled;
  const double* device_coefs;  // when set, step_size, bc2 and decay (CUDA graphs)
};

template <typename T>
__global__ void adam_kernel(const __grid_constant__ TensorList<4> list, AdamCoef<T> k) {
  const int t = tensor_of_block(list.first_block, list.count);
  T* p = static_cast<T*>(list.ptr[0][t]);
  const T* g = static_cast<const T*>(list.ptr[1][t]);
  T* m = static_cast<T*>(list.ptr[2][t]);
  T* v = static_cast<T*>(list.ptr[3][t]);
  const T step_size = k.device_coefs != nullptr ? static_cast<T>(k.device_coefs[0]) : k.step_size;
  const T bc2 = k.device_coefs != nullptr ? static_cast<T>(k.device_coefs[1]) : k.bc2;
  const T decay = k.device_coefs != nullptr ? static_cast<T>(k.device_coefs[2]) : k.decay;
  const int64_t start = (static_cast<int64_t>(blockIdx.x) - list.first_block[t]) * kChunk;
  const int64_t end = min(list.numel[t], start + kChunk);
  for (int64_t i = start + threadIdx.x; i < end; i += blockDim.x) {
    T gi = g[i], pi = p[i];
    if (k.coupled) gi += k.wd * pi;
    if (k.decoupled) pi *= decay;
    const T mi = k.b1 * m[i] + k.one_b1 * gi;
    const T vi = k.b2 * v[i] + k.one_b2 * gi * gi;
    m[i] = mi;
    v[i] = vi;
    p[i] = pi - step_size * mi / (sqrt(vi / bc2) + k.eps);
  }
}

// Fills TensorLists from the host pointer arrays and calls launch(list, blocks) for each batch of tensors.
template <int K, typename Launch>
void for_each_batch(int64_t count, const void* const* const (&ptrs)[K], const int64_t* numels, Launch launch) {
  // Zeroed: the kernel reads only the first `count` slots, but the rest would otherwise carry stale stack bytes
  // into the launch (which the simulated GPU, checking every pointer-like parameter word, takes as pointers).
  TensorList<K> list{};
  int64_t blocks = 0;
  for (int64_t t = 0; t < count; ++t) {
    if (list.count == kListTensors) {
      launch(list, blocks);
      list.count = 0;
      blocks = 0;
    }
    const int j = list.count++;
    for (int k = 0; k < K; ++k) list.ptr[k][j] = const_cast<void*>(ptrs[k][t]);
    list.numel[j] = numels[t];
    list.first_block[j] = blocks;
    blocks += ceil_div(numels[t], kChunk);
  }
  if (list.count > 0) launch(list, blocks);
}

unsigned launch_blocks(int64_t blocks) {
  TD_CHECK(blocks <= 0x7fffffff, "optimizer step over too many elements for one launch");
  return static_cast<unsigned>(blocks);
}

}  // namespace

void CudaNNBackend::dropout_mask(const DropoutMaskArgs& args, const Stream& s) {
  if (args.n <= 0) return;
  LaunchScope ls(s);
  launch_kernel(TD_KERNEL(dropout_mask_kernel), grid_for(ceil_div(ceil_div(args.n, 4), kThreads), ls.device()),
                kThreads, 0, ls.stream(), args.n, args.p, args.seed, args.offset, args.offset_delta, args.mask);
  TD_CUDA_CHECK_LAUNCH(ls.stream(), "dropout_mask");
}

void CudaNNBackend::masked_scale(const MaskedScaleArgs& args, const Stream& s) {
  if (args.n <= 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT_BF16(args.t, "dropout", {
    launch_kernel(TD_KERNEL(masked_scale_kernel<scalar_t>), grid_for(ceil_div(args.n, kThreads), ls.device()), kThreads,
                  0, ls.stream(), static_cast<const scalar_t*>(args.x), args.mask,
                  static_cast<compute_t<scalar_t>>(args.scale), static_cast<scalar_t*>(args.y), args.n);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "masked_scale");
  });
}

void CudaNNBackend::sgd_step(const SgdStepArgs& args, const Stream& s) {
  if (args.count <= 0) return;
  LaunchScope ls(s);
  const bool use_momentum = args.h.momentum != 0;
  // Without momentum the buffer list repeats the parameters; the kernel never touches it.
  const void* const* lists[3] = {args.params, args.grads, use_momentum ? args.momentum_buffers : args.params};
  TD_DISPATCH_FLOAT(args.t, "sgd_step_", {
    using T = scalar_t;
    // Zeroed first, then filled: the padding between the flags and the pointer is copied into the launch's
    // parameters, where the simulated GPU reads every word as a possible device pointer (stack garbage there
    // once looked like a freed pool block).
    SgdCoef<T> k{};
    k.lr = static_cast<T>(args.h.lr);
    k.momentum = static_cast<T>(args.h.momentum);
    k.damp = static_cast<T>(1.0 - args.h.dampening);
    k.wd = static_cast<T>(args.h.weight_decay);
    k.use_wd = args.h.weight_decay != 0;
    k.use_momentum = use_momentum;
    k.nesterov = args.h.nesterov;
    k.first = args.h.first_step;
    k.device_lr = args.h.device_lr;
    for_each_batch<3>(args.count, lists, args.numels, [&](const TensorList<3>& list, int64_t blocks) {
      launch_kernel(TD_KERNEL(sgd_kernel<T>), launch_blocks(blocks), kThreads, 0, ls.stream(), list, k);
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "sgd_step_");
    });
  });
}

void CudaNNBackend::adam_step(const AdamStepArgs& args, const Stream& s) {
  if (args.count <= 0) return;
  LaunchScope ls(s);
  const void* const* lists[4] = {args.params, args.grads, args.exp_avg, args.exp_avg_sq};
  const double step = static_cast<double>(args.h.step);
  TD_DISPATCH_FLOAT(args.t, "adam_step_", {
    using T = scalar_t;
    AdamCoef<T> k{};  // zeroed first, as SgdCoef above
    k.b1 = static_cast<T>(args.h.beta1);
    k.b2 = static_cast<T>(args.h.beta2);
    k.one_b1 = static_cast<T>(1.0 - args.h.beta1);
    k.one_b2 = static_cast<T>(1.0 - args.h.beta2);
    k.eps = static_cast<T>(args.h.eps);
    k.wd = static_cast<T>(args.h.weight_decay);
    k.step_size = static_cast<T>(args.h.lr / (1.0 - std::pow(args.h.beta1, step)));
    k.bc2 = static_cast<T>(1.0 - std::pow(args.h.beta2, step));
    k.decay = static_cast<T>(1.0 - args.h.lr * args.h.weight_decay);
    k.coupled = args.h.weight_decay != 0 && !args.h.decoupled_weight_decay;
    k.decoupled = args.h.weight_decay != 0 && args.h.decoupled_weight_decay;
    k.device_coefs = args.h.device_coefs;
    for_each_batch<4>(args.count, lists, args.numels, [&](const TensorList<4>& list, int64_t blocks) {
      launch_kernel(TD_KERNEL(adam_kernel<T>), launch_blocks(blocks), kThreads, 0, ls.stream(), list, k);
      TD_CUDA_CHECK_LAUNCH(ls.stream(), "adam_step_");
    });
  });
}

}  // namespace cuda
}  // namespace tandem
