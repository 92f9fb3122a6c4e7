// Pieces of the local backend that the MPI and NCCL backends reuse so that all three give bitwise equal
// results: how a tensor is chunked over ranks, the rank-order sum (CPU and CUDA), byte copies, checks.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <type_traits>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/dtype.h"
#include "runtime/base/half.h"
#include "runtime/base/hostdevice.h"

struct CUstream_st;

namespace tandem {
class Stream;
class Tensor;

namespace parallel {
namespace detail {

// First element of rank `rank`'s chunk when `count` elements are split over `size` ranks (chunk r is
// [chunk_begin(r), chunk_begin(r + 1)); chunks differ by at most one element and may be empty).
inline int64_t chunk_begin(int64_t count, int rank, int size) {
  return count / size * rank + count % size * rank / size;
}

// dst[i] = scale * (srcs[0][i] + srcs[1][i] + ... + srcs[n-1][i]), added in rank order. All pointers are on
// the stream's device (on CUDA the kernel is queued on it); dst may alias any source (in place). The accesses
// are reported to the stream checker as `op`'s.
void rank_order_sum(const std::vector<const void*>& srcs, void* dst, int64_t count, DType dtype, double scale,
                    const Stream& stream, const char* op);
// The CUDA half of rank_order_sum (local_comm.cu). At most kMaxSumInputs sources.
constexpr int kMaxSumInputs = 64;
void rank_order_sum_cuda(const void* const* srcs, int n, void* dst, int64_t count, DType dtype, double scale,
                         CUstream_st* stream);

// Throws unless `scale` can apply to `dtype` (integers sum exactly and take no scale).
void check_sum_args(DType dtype, double scale, const char* op);
// Shape/dtype/device checks shared by every backend: all_gather's out is `size` copies of in along dim 0;
// reduce_scatter's in splits into `size` equal parts along dim 0, each the shape of out.
void check_all_gather_args(const Tensor& in, const Tensor& out, int size);
void check_reduce_scatter_args(const Tensor& in, const Tensor& out, int size, double scale);

// Copies bytes between two CPU buffers (memcpy), or two CUDA buffers, asynchronously on `stream` (a peer
// copy when the devices differ); reported to the stream checker as `op`'s.
void copy_bytes(void* dst, Device dst_device, const void* src, Device src_device, size_t bytes, const Stream& stream,
                const char* op);

// Bytes a rank sends plus receives in an all_reduce by chunks (reduce-scatter, then all-gather).
int64_t all_reduce_bytes(int64_t count, size_t element_size, int rank, int size);

void check_peer(int peer, int size, const char* what);
void check_tag(int tag);
std::string describe(const Tensor& t);  // "[2, 3] f32 on cpu"

// The accumulator of each dtype and the conversions from and to it.
template <typename T>
struct SumTraits {
  using Acc = typename std::conditional<std::is_floating_point<T>::value, T, int64_t>::type;
  static TD_HOST_DEVICE Acc load(T v) { return static_cast<Acc>(v); }
  static TD_HOST_DEVICE T store(Acc a) { return static_cast<T>(a); }
};
struct F16Bits {
  uint16_t bits;
};
struct BF16Bits {
  uint16_t bits;
};
template <>
struct SumTraits<F16Bits> {
  using Acc = float;
  static TD_HOST_DEVICE Acc load(F16Bits v) { return f16_to_float(v.bits); }
  static TD_HOST_DEVICE F16Bits store(Acc a) { return F16Bits{float_to_f16(a)}; }
};
template <>
struct SumTraits<BF16Bits> {
  using Acc = float;
  static TD_HOST_DEVICE Acc load(BF16Bits v) { return bf16_to_float(v.bits); }
  static TD_HOST_DEVICE BF16Bits store(Acc a) { return BF16Bits{float_to_bf16(a)}; }
};

// The scale step shared by the CPU loop and the CUDA kernel: the product is formed in f64 and rounded once
// to the accumulator type.
template <typename Acc>
TD_HOST_DEVICE Acc apply_scale(Acc acc, double scale) {
  return static_cast<Acc>(static_cast<double>(acc) * scale);
}

}  // namespace detail
}  // namespace parallel
}  // namespace tandem
