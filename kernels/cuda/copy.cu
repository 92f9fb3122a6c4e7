// CUDA fill and copy kernels: contiguous fast paths with 16-byte accesses, a tiled path for transposing
// copies, and strided paths; conversions between all seven dtypes match the CPU bit for bit.
#include <algorithm>
#include <type_traits>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/dispatch.h"
#include "runtime/base/cuda_check.h"
#include "runtime/base/half.h"

namespace tandem {
namespace cuda {

namespace {
// f16 and bf16 are held as uint16_t bit patterns; the tags select their conversions.
struct F16Tag {};
struct BF16Tag {};
template <typename T>
struct stored {
  using type = T;
};
template <>
struct stored<F16Tag> {
  using type = uint16_t;
};
template <>
struct stored<BF16Tag> {
  using type = uint16_t;
};
template <typename T>
using stored_t = typename stored<T>::type;
template <typename T>
constexpr bool kIsHalfTag = std::is_same<T, F16Tag>::value || std::is_same<T, BF16Tag>::value;

template <typename S>
__device__ __forceinline__ double as_double(stored_t<S> v) {
  if constexpr (std::is_same<S, F16Tag>::value)
    return f16_to_float(v);
  else if constexpr (std::is_same<S, BF16Tag>::value)
    return bf16_to_float(v);
  else
    return static_cast<double>(v);
}

// The conversion rules of the CPU's copy: through float for f16/bf16, else a plain static_cast.
template <typename D, typename S>
__device__ __forceinline__ stored_t<D> convert(stored_t<S> v) {
  if constexpr (std::is_same<D, S>::value)
    return v;
  else if constexpr (std::is_same<D, F16Tag>::value)
    return float_to_f16(static_cast<float>(as_double<S>(v)));
  else if constexpr (std::is_same<D, BF16Tag>::value)
    return float_to_bf16(static_cast<float>(as_double<S>(v)));
  else if constexpr (kIsHalfTag<S>)
    return static_cast<D>(as_double<S>(v));
  else
    return static_cast<D>(v);
}

// Elements converted per thread step on the contiguous path (one or two 16-byte accesses per side).
constexpr int kConvertN = 4;

// dst = convert(src) over n contiguous elements; `vec` when both pointers are aligned to kConvertN elements.
template <typename D, typename S>
__global__ void convert_contiguous_kernel(const stored_t<S>* src, stored_t<D>* dst, int64_t n, bool vec) {
  using SV = stored_t<S>;
  using DV = stored_t<D>;
  constexpr int N = kConvertN;
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  int64_t done = 0;
  if (vec) {
    const int64_t nvec = n / N;
    for (int64_t i = tid; i < nvec; i += threads) {
      Vec<SV, N> in = load_vec<SV, N>(src + i * N);
      Vec<DV, N> out;
#pragma unroll
      for (int e = 0; e < N; ++e) out.v[e] = convert<D, S>(in.v[e]);
      store_vec<DV, N>(dst + i * N, out);
    }
    done = nvec * N;
  }
  for (int64_t i = done + tid; i < n; i += threads) dst[i] = convert<D, S>(src[i]);
}

template <typename D, typename S>
void launch_convert_contiguous(const void* src, void* dst, int64_t n, const LaunchScope& ls) {
  if constexpr (std::is_same<D, S>::value) {
    TD_ASSERT(false, "same-dtype contiguous copies are done by cudaMemcpyAsync");
  } else {
    using SV = stored_t<S>;
    using DV = stored_t<D>;
    const bool vec = is_aligned(src, sizeof(SV) * kConvertN) && is_aligned(dst, sizeof(DV) * kConvertN);
    const unsigned grid = grid_for(ceil_div(n, kThreads * (vec ? kConvertN : 1)), ls.device());
    launch_kernel(TD_KERNEL(convert_contiguous_kernel<D, S>), grid, kThreads, 0, ls.stream(),
                  static_cast<const SV*>(src), static_cast<DV*>(dst), n, vec);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "convert_contiguous_kernel");
  }
}

template <typename D>
void convert_contiguous_to(DType src_t, const void* src, void* dst, int64_t n, const LaunchScope& ls) {
  switch (src_t) {
    case DType::F32: return launch_convert_contiguous<D, float>(src, dst, n, ls);
    case DType::F64: return launch_convert_contiguous<D, double>(src, dst, n, ls);
    case DType::F16: return launch_convert_contiguous<D, F16Tag>(src, dst, n, ls);
    case DType::BF16: return launch_convert_contiguous<D, BF16Tag>(src, dst, n, ls);
    case DType::I32: return launch_convert_contiguous<D, int32_t>(src, dst, n, ls);
    case DType::I64: return launch_convert_contiguous<D, int64_t>(src, dst, n, ls);
    case DType::U8: return launch_convert_contiguous<D, uint8_t>(src, dst, n, ls);
  }
}

void convert_contiguous(DType src_t, const void* src, DType dst_t, void* dst, int64_t n, const LaunchScope& ls) {
  switch (dst_t) {
    case DType::F32: return convert_contiguous_to<float>(src_t, src, dst, n, ls);
    case DType::F64: return convert_contiguous_to<double>(src_t, src, dst, n, ls);
    case DType::F16: return convert_contiguous_to<F16Tag>(src_t, src, dst, n, ls);
    case DType::BF16: return convert_contiguous_to<BF16Tag>(src_t, src, dst, n, ls);
    case DType::I32: return convert_contiguous_to<int32_t>(src_t, src, dst, n, ls);
    case DType::I64: return convert_contiguous_to<int64_t>(src_t, src, dst, n, ls);
    case DType::U8: return convert_contiguous_to<uint8_t>(src_t, src, dst, n, ls);
  }
}

// A value of any dtype on its way to another: integers stay exact in 64 bits, floats go through double
// (exact for f32, f16 and bf16), which gives the same results as convert<D, S>.
struct AnyValue {
  bool is_int;
  int64_t i;
  double f;
};

template <typename I>
__device__ __forceinline__ AnyValue load_any(DType t, const void* p, I off) {
  switch (t) {
    case DType::F32: return {false, 0, static_cast<const float*>(p)[off]};
    case DType::F64: return {false, 0, static_cast<const double*>(p)[off]};
    case DType::F16: return {false, 0, f16_to_float(static_cast<const uint16_t*>(p)[off])};
    case DType::BF16: return {false, 0, bf16_to_float(static_cast<const uint16_t*>(p)[off])};
    case DType::I32: return {true, static_cast<const int32_t*>(p)[off], 0.0};
    case DType::I64: return {true, static_cast<const int64_t*>(p)[off], 0.0};
    case DType::U8: return {true, static_cast<const uint8_t*>(p)[off], 0.0};
  }
  return {false, 0, 0.0};
}

template <typename D>
__device__ __forceinline__ D cast_any(const AnyValue& v) {
  return v.is_int ? static_cast<D>(v.i) : static_cast<D>(v.f);
}

template <typename I>
__device__ __forceinline__ void store_any(DType t, void* p, I off, const AnyValue& v) {
  switch (t) {
    case DType::F32: static_cast<float*>(p)[off] = cast_any<float>(v); break;
    case DType::F64: static_cast<double*>(p)[off] = cast_any<double>(v); break;
    case DType::F16:
      static_cast<uint16_t*>(p)[off] = float_to_f16(static_cast<float>(v.is_int ? static_cast<double>(v.i) : v.f));
      break;
    case DType::BF16:
      static_cast<uint16_t*>(p)[off] = float_to_bf16(static_cast<float>(v.is_int ? static_cast<double>(v.i) : v.f));
      break;
    case DType::I32: static_cast<int32_t*>(p)[off] = cast_any<int32_t>(v); break;
    case DType::I64: static_cast<int64_t*>(p)[off] = cast_any<int64_t>(v); break;
    case DType::U8: static_cast<uint8_t*>(p)[off] = cast_any<uint8_t>(v); break;
  }
}

// Strided copy between two different dtypes (the dtype switches are uniform across the grid).
template <typename I>
__global__ void convert_strided_kernel(DType src_t, const void* src, StridedDesc sd, DType dst_t, void* dst,
                                       StridedDesc dd, I n) {
  const StridedDesc* const ds[2] = {&dd, &sd};
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    I off[2];
    strided_offsets<I, 2>(i, dd, ds, off);
    store_any(dst_t, dst, off[0], load_any(src_t, src, off[1]));
  }
}

// Strided copy of elements of one byte size.
template <typename E, typename I>
__global__ void copy_strided_kernel(const E* src, StridedDesc sd, E* dst, StridedDesc dd, I n) {
  const StridedDesc* const ds[2] = {&dd, &sd};
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    I off[2];
    strided_offsets<I, 2>(i, dd, ds, off);
    dst[off[0]] = src[off[1]];
  }
}

// A copy that transposes dims k and L (the last one): src is contiguous along k and dst along L. A block
// moves a 64 x 64 tile through shared memory in 4 x 4 blocks of elements: each thread reads four rows of
// src as 4-element vectors along k, and a thread of the second phase reads a block back and writes four
// rows of dst as vectors along L (the block is transposed in registers). Both sides thus move 16 bytes
// (f32) per access, and each half-warp covers one 256-byte row segment. A tile row's units are stored at
// position unit ^ (row / 4): the two phases' vector accesses then fall on distinct banks (f32). Tiles are
// blockIdx (l, k, batch), so no division is done per tile; vectors are used where the shape, the strides
// and the pointer allow, element accesses elsewhere.
constexpr int kTile = 64;
constexpr int kMicro = 4;
constexpr int kTileUnits = kTile / kMicro;
constexpr int kTileThreads = kTileUnits * kTileUnits;
constexpr int64_t kMaxGridX = (int64_t{1} << 31) - 1;
constexpr int64_t kMaxGridYZ = 65535;

__device__ __forceinline__ int tile_slot(int row, int unit) { return unit ^ (row / kMicro); }

template <typename E>
__global__ void __launch_bounds__(kTileThreads)
    transpose_copy_kernel(const E* src, StridedDesc sd, E* dst, StridedDesc dd, int k, int64_t tiles_k, int64_t tiles_l,
                          int64_t batches, bool vec_load, bool vec_store) {
  using Unit = Vec<E, kMicro>;
  __shared__ Unit tile[kTile][kTileUnits];
  const int L = sd.ndim - 1;
  const int64_t n_k = sd.shape[k], n_l = sd.shape[L];
  const int64_t src_l = sd.strides[L], dst_k = dd.strides[k];
  const int a = threadIdx.x % kTileUnits, b = threadIdx.x / kTileUnits;
  for (int64_t batch = blockIdx.z; batch < batches; batch += gridDim.z) {
    int64_t soff = 0, doff = 0, rest = batch;
#pragma unroll
    for (int d = kMaxDims - 1; d >= 0; --d) {
      if (d < L && d != k) {
        const int64_t idx = rest % sd.shape[d];
        rest /= sd.shape[d];
        soff += idx * sd.strides[d];
        doff += idx * dd.strides[d];
      }
    }
    for (int64_t tk = blockIdx.y; tk < tiles_k; tk += gridDim.y) {
      for (int64_t tl = blockIdx.x; tl < tiles_l; tl += gridDim.x) {
        const int64_t k0 = tk * kTile, l0 = tl * kTile;
        // Load phase: unit a along k of rows 4b .. 4b + 3.
        const int64_t kk = k0 + a * kMicro;
#pragma unroll
        for (int i = 0; i < kMicro; ++i) {
          const int row = b * kMicro + i;
          const int64_t l = l0 + row;
          const E* p = src + soff + l * src_l + kk;
          Unit u{};  // zeros outside the tensor (never written out)
          if (vec_load) {
            if (l < n_l && kk < n_k) u = load_vec<E, kMicro>(p);
          } else {
#pragma unroll
            for (int j = 0; j < kMicro; ++j)
              if (l < n_l && kk + j < n_k) u.v[j] = p[j];
          }
          tile[row][tile_slot(row, a)] = u;
        }
        __syncthreads();
        // Store phase: rows 4a .. 4a + 3 of the tile (along l), unit b (along k), written as dst rows
        // k0 + 4b + j at l0 + 4a.
        Unit w[kMicro];
#pragma unroll
        for (int i = 0; i < kMicro; ++i) {
          const int row = a * kMicro + i;
          w[i] = tile[row][tile_slot(row, b)];
        }
        const int64_t l = l0 + a * kMicro;
#pragma unroll
        for (int j = 0; j < kMicro; ++j) {
          const int64_t kj = k0 + b * kMicro + j;
          E* p = dst + doff + kj * dst_k + l;
          Unit out;
#pragma unroll
          for (int i = 0; i < kMicro; ++i) out.v[i] = w[i].v[j];
          if (vec_store) {
            if (kj < n_k && l < n_l) store_vec<E, kMicro>(p, out);
          } else {
#pragma unroll
            for (int i = 0; i < kMicro; ++i)
              if (kj < n_k && l + i < n_l) p[i] = out.v[i];
          }
        }
        __syncthreads();  // the tile is rewritten by the next iteration
      }
    }
  }
}

// The dim (other than the last) along which src is contiguous, when a tiled transpose pays off; else -1.
int transpose_dim(const StridedDesc& sd, const StridedDesc& dd) {
  const int L = sd.ndim - 1;
  if (L < 1 || dd.strides[L] != 1 || sd.strides[L] == 1 || sd.shape[L] < 16) return -1;
  for (int d = 0; d < L; ++d)
    if (sd.strides[d] == 1 && sd.shape[d] >= 16 && dd.strides[d] != 1) return d;
  return -1;
}

// Whether the tiled transpose may move kMicro-element vectors along dim `along` (stride 1) of p: every
// other stride, the extent along it and the pointer are multiples of a vector.
template <typename E>
bool tile_vectors_fit(const void* p, const StridedDesc& d, int along, int64_t extent) {
  if (!is_aligned(p, sizeof(E) * kMicro) || extent % kMicro != 0) return false;
  for (int i = 0; i < d.ndim; ++i)
    if (i != along && d.strides[i] % kMicro != 0) return false;
  return true;
}

// dst[i] = v over n contiguous elements: 16-byte stores after a scalar head that reaches 16-byte alignment.
template <typename E>
__global__ void fill_contiguous_kernel(E* p, int64_t head, int64_t nvec, int64_t n, E v) {
  constexpr int W = vec_width<E>();
  const int64_t tid = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t threads = static_cast<int64_t>(gridDim.x) * blockDim.x;
  Vec<E, W> pattern;
#pragma unroll
  for (int e = 0; e < W; ++e) pattern.v[e] = v;
  for (int64_t i = tid; i < nvec; i += threads) store_vec<E, W>(p + head + i * W, pattern);
  if (tid < head) p[tid] = v;
  const int64_t tail = head + nvec * W + tid;
  if (tail < n) p[tail] = v;
}

template <typename E, typename I>
__global__ void fill_strided_kernel(E* p, StridedDesc d, I n, E v) {
  const StridedDesc* const ds[1] = {&d};
  const I step = static_cast<I>(gridDim.x) * blockDim.x;
  for (I i = static_cast<I>(blockIdx.x) * blockDim.x + threadIdx.x; i < n; i += step) {
    I off[1];
    strided_offsets<I, 1>(i, d, ds, off);
    p[off[0]] = v;
  }
}

template <typename E>
void launch_fill(void* dst, const StridedDesc& d0, E v, const LaunchScope& ls) {
  auto c = collapse<1>({&d0});
  const StridedDesc& d = c[0];
  const int64_t n = d.numel();
  E* p = static_cast<E*>(dst);
  if (d.ndim == 1 && d.strides[0] == 1) {
    constexpr int W = vec_width<E>();
    const int64_t misalign = static_cast<int64_t>(reinterpret_cast<uintptr_t>(p) % 16);
    const int64_t head = std::min<int64_t>(n, (16 - misalign) % 16 / static_cast<int64_t>(sizeof(E)));
    const int64_t nvec = (n - head) / W;
    launch_kernel(TD_KERNEL(fill_contiguous_kernel<E>), grid_for(ceil_div(nvec, kThreads), ls.device()), kThreads, 0,
                  ls.stream(), p, head, nvec, n, v);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "fill_contiguous_kernel");
    return;
  }
  const StridedDesc* all[1] = {&d};
  const unsigned grid = grid_for(ceil_div(n, kThreads), ls.device());
  if (fits_int32(n, all, 1))
    launch_kernel(TD_KERNEL(fill_strided_kernel<E, uint32_t>), grid, kThreads, 0, ls.stream(), p, d,
                  static_cast<uint32_t>(n), v);
  else
    launch_kernel(TD_KERNEL(fill_strided_kernel<E, int64_t>), grid, kThreads, 0, ls.stream(), p, d, n, v);
  TD_CUDA_CHECK_LAUNCH(ls.stream(), "fill_strided_kernel");
}

template <typename E>
void launch_copy_same(const void* src, const StridedDesc& sd, void* dst, const StridedDesc& dd, bool narrow,
                      const LaunchScope& ls) {
  const int64_t n = dd.numel();
  const int k = transpose_dim(sd, dd);
  if (k >= 0) {
    const int L = sd.ndim - 1;
    const int64_t tiles_k = ceil_div(sd.shape[k], kTile), tiles_l = ceil_div(sd.shape[L], kTile);
    const int64_t batches = n / (sd.shape[k] * sd.shape[L]);
    const dim3 grid(static_cast<unsigned>(std::min<int64_t>(tiles_l, kMaxGridX)),
                    static_cast<unsigned>(std::min<int64_t>(tiles_k, kMaxGridYZ)),
                    static_cast<unsigned>(std::min<int64_t>(batches, kMaxGridYZ)));
    launch_kernel(TD_KERNEL(transpose_copy_kernel<E>), grid, kTileThreads, 0, ls.stream(), static_cast<const E*>(src),
                  sd, static_cast<E*>(dst), dd, k, tiles_k, tiles_l, batches,
                  tile_vectors_fit<E>(src, sd, k, sd.shape[k]), tile_vectors_fit<E>(dst, dd, L, sd.shape[L]));
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "transpose_copy_kernel");
    return;
  }
  const unsigned grid = grid_for(ceil_div(n, kThreads), ls.device());
  if (narrow)
    launch_kernel(TD_KERNEL(copy_strided_kernel<E, uint32_t>), grid, kThreads, 0, ls.stream(),
                  static_cast<const E*>(src), sd, static_cast<E*>(dst), dd, static_cast<uint32_t>(n));
  else
    launch_kernel(TD_KERNEL(copy_strided_kernel<E, int64_t>), grid, kThreads, 0, ls.stream(),
                  static_cast<const E*>(src), sd, static_cast<E*>(dst), dd, n);
  TD_CUDA_CHECK_LAUNCH(ls.stream(), "copy_strided_kernel");
}
}  // namespace

void CudaBackend::fill(const FillArgs& args, const Stream& s) {
  if (args.d.numel() == 0) return;
  LaunchScope ls(s);
  switch (args.t) {
    case DType::F32: return launch_fill<float>(args.dst, args.d, static_cast<float>(args.value), ls);
    case DType::F64: return launch_fill<double>(args.dst, args.d, args.value, ls);
    case DType::F16: return launch_fill<uint16_t>(args.dst, args.d, float_to_f16(static_cast<float>(args.value)), ls);
    case DType::BF16: return launch_fill<uint16_t>(args.dst, args.d, float_to_bf16(static_cast<float>(args.value)), ls);
    case DType::I32: return launch_fill<int32_t>(args.dst, args.d, static_cast<int32_t>(args.value), ls);
    case DType::I64: return launch_fill<int64_t>(args.dst, args.d, static_cast<int64_t>(args.value), ls);
    case DType::U8: return launch_fill<uint8_t>(args.dst, args.d, static_cast<uint8_t>(args.value), ls);
  }
}

namespace {
// Both descriptors with their dims in the destination's memory order (its strides descending; a copy may visit
// the elements in any order), so that consecutive threads write consecutive elements and a copy into a permuted
// destination (to_channels_last's) takes the tiled transpose rather than scattered stores.
std::array<StridedDesc, 2> in_destination_order(const StridedDesc& dd, const StridedDesc& sd) {
  int order[kMaxDims];
  for (int i = 0; i < dd.ndim; ++i) order[i] = i;
  std::stable_sort(order, order + dd.ndim, [&](int a, int b) { return dd.strides[a] > dd.strides[b]; });
  std::array<StridedDesc, 2> out{dd, sd};
  for (int i = 0; i < dd.ndim; ++i) {
    out[0].shape[i] = out[1].shape[i] = dd.shape[order[i]];
    out[0].strides[i] = dd.strides[order[i]];
    out[1].strides[i] = sd.strides[order[i]];
  }
  return out;
}
}  // namespace

void CudaBackend::copy(const CopyArgs& args, const Stream& s) {
  if (args.dst_d.numel() == 0) return;
  LaunchScope ls(s);
  const std::array<StridedDesc, 2> ordered = in_destination_order(args.dst_d, args.src_d);
  auto c = collapse<2>({&ordered[0], &ordered[1]});
  const StridedDesc &dd = c[0], &sd = c[1];
  const int64_t n = dd.numel();
  const bool contiguous = dd.ndim == 1 && dd.strides[0] == 1 && sd.strides[0] == 1;
  if (args.src_t == args.dst_t && contiguous) {
    TD_CUDA_CHECK(cudaMemcpyAsync(args.dst, args.src, static_cast<size_t>(n) * dtype_size(args.src_t),
                                  cudaMemcpyDeviceToDevice, ls.stream()));
    return;
  }
  if (contiguous) return convert_contiguous(args.src_t, args.src, args.dst_t, args.dst, n, ls);
  const StridedDesc* all[2] = {&dd, &sd};
  const bool narrow = fits_int32(n, all, 2);
  if (args.src_t == args.dst_t) {
    TD_DISPATCH_BYTES(args.src_t, launch_copy_same<scalar_t>(args.src, sd, args.dst, dd, narrow, ls));
    return;
  }
  const unsigned grid = grid_for(ceil_div(n, kThreads), ls.device());
  if (narrow)
    launch_kernel(TD_KERNEL(convert_strided_kernel<uint32_t>), grid, kThreads, 0, ls.stream(), args.src_t, args.src, sd,
                  args.dst_t, args.dst, dd, static_cast<uint32_t>(n));
  else
    launch_kernel(TD_KERNEL(convert_strided_kernel<int64_t>), grid, kThreads, 0, ls.stream(), args.src_t, args.src, sd,
                  args.dst_t, args.dst, dd, n);
  TD_CUDA_CHECK_LAUNCH(ls.stream(), "convert_strided_kernel");
}

}  // namespace cuda
}  // namespace tandem
