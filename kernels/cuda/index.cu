// CUDA indexing kernels: index_select, gather, index_add, scatter_add and one_hot. A bad index never
// touches memory out of bounds: the element is skipped (reads give 0) and the device error flag is set,
// which the runtime raises as IndexError at the next synchronization. The adds are deterministic without
// atomics: every destination element receives its contributions in increasing j, from one thread.
#include <algorithm>

#include "kernels/cuda/cuda_backend.h"
#include "kernels/cuda/device_utils.cuh"
#include "kernels/cuda/kernel_launch.cuh"
#include "kernels/cuda/launch.h"
#include "kernels/dispatch.h"
#include "runtime/base/cuda_check.h"

namespace tandem {
namespace cuda {

namespace {
__device__ __forceinline__ bool out_of_range(int64_t v, int64_t n) { return v < 0 || v >= n; }

// out[o, j, i] = x[o, idx[j], i], moving units U of 1 to 16 bytes (inner_u units per row).
template <typename U>
__global__ void index_select_kernel(const U* x, int64_t outer, int64_t n_src, int64_t inner_u, const int64_t* idx,
                                    int64_t n_idx, U* out, int32_t* flag) {
  const int64_t total = outer * n_idx * inner_u;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step) {
    const int64_t i = p % inner_u, q = p / inner_u, j = q % n_idx, o = q / n_idx;
    const int64_t v = idx[j];
    if (out_of_range(v, n_src)) {
      if (i == 0 && o == 0) flag_error(flag, DeviceErrorCode::IndexOutOfRange);
      out[p] = U{};
    } else {
      out[p] = x[(o * n_src + v) * inner_u + i];
    }
  }
}

// out[o, j, i] = x[o, idx[o, j, i], i].
template <typename E>
__global__ void gather_kernel(const E* x, int64_t outer, int64_t n_src, int64_t inner, const int64_t* idx,
                              int64_t n_idx, E* out, int32_t* flag) {
  const int64_t total = outer * n_idx * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step) {
    const int64_t i = p % inner, o = p / (n_idx * inner);
    const int64_t v = idx[p];
    if (out_of_range(v, n_src)) {
      flag_error(flag, DeviceErrorCode::IndexOutOfRange);
      out[p] = E{};
    } else {
      out[p] = x[(o * n_src + v) * inner + i];
    }
  }
}

// The adds, two ways with the same result bit for bit (each destination starts from its value and adds its
// sources in increasing j):
//  - by column: one thread per (o, i) walks j = 0 .. n_idx - 1 and adds into dst[o, idx, i]; only that
//    thread touches that column. Work = the size of src; parallelism = outer * inner.
//  - by destination: one thread per dst element (o, d, i) scans all j for idx == d. Work = dst * n_idx;
//    used when outer * inner is too small to keep the GPU busy and the scan stays cheap.
// kPerElement: scatter_add (idx has src's shape) rather than index_add (idx is 1-D over j).
template <typename T, bool kPerElement>
__global__ void add_by_column_kernel(const T* src, int64_t outer, int64_t n_idx, int64_t inner, const int64_t* idx,
                                     int64_t n_dst, T* dst, int32_t* flag) {
  const int64_t columns = outer * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t c = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; c < columns; c += step) {
    const int64_t o = c / inner, i = c % inner;
    const T* s = src + o * n_idx * inner + i;
    const int64_t* ix = kPerElement ? idx + o * n_idx * inner + i : idx;
    T* d = dst + o * n_dst * inner + i;
    bool bad = false;
    for (int64_t j = 0; j < n_idx; ++j) {
      const int64_t v = kPerElement ? ix[j * inner] : ix[j];
      if (out_of_range(v, n_dst)) {
        bad = true;
        continue;
      }
      d[v * inner] += s[j * inner];
    }
    if (bad && (kPerElement || c == 0)) flag_error(flag, DeviceErrorCode::IndexOutOfRange);
  }
}

template <typename T, bool kPerElement>
__global__ void add_by_destination_kernel(const T* src, int64_t outer, int64_t n_idx, int64_t inner, const int64_t* idx,
                                          int64_t n_dst, T* dst, int32_t* flag) {
  const int64_t total = outer * n_dst * inner;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step) {
    const int64_t i = p % inner, q = p / inner, dpos = q % n_dst, o = q / n_dst;
    const T* s = src + o * n_idx * inner + i;
    const int64_t* ix = kPerElement ? idx + o * n_idx * inner + i : idx;
    const bool reporter = dpos == 0 && (kPerElement || (o == 0 && i == 0));
    T acc = dst[p];
    for (int64_t j = 0; j < n_idx; ++j) {
      const int64_t v = kPerElement ? ix[j * inner] : ix[j];
      if (v == dpos)
        acc += s[j * inner];
      else if (reporter && out_of_range(v, n_dst))
        flag_error(flag, DeviceErrorCode::IndexOutOfRange);
    }
    dst[p] = acc;
  }
}

template <typename T, bool kPerElement>
void launch_add(const void* src, int64_t outer, int64_t n_idx, int64_t inner, const int64_t* idx, int64_t n_dst,
                void* dst, const LaunchScope& ls) {
  constexpr int64_t kFewColumns = int64_t{1} << 14;
  constexpr int64_t kMaxScan = int64_t{1} << 28;
  const int64_t columns = outer * inner, dst_elems = outer * n_dst * inner;
  auto sp = static_cast<const T*>(src);
  auto dp = static_cast<T*>(dst);
  int32_t* flag = device_error_flag(ls.device());
  if (columns < kFewColumns && dst_elems <= kMaxScan / std::max<int64_t>(n_idx, 1)) {
    launch_kernel(TD_KERNEL(add_by_destination_kernel<T, kPerElement>),
                  grid_for(ceil_div(dst_elems, kThreads), ls.device()), kThreads, 0, ls.stream(), sp, outer, n_idx,
                  inner, idx, n_dst, dp, flag);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "add_by_destination_kernel");
  } else {
    launch_kernel(TD_KERNEL(add_by_column_kernel<T, kPerElement>), grid_for(ceil_div(columns, kThreads), ls.device()),
                  kThreads, 0, ls.stream(), sp, outer, n_idx, inner, idx, n_dst, dp, flag);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "add_by_column_kernel");
  }
}

template <typename T>
__global__ void one_hot_kernel(const int64_t* idx, int64_t n, int64_t classes, T* out, int32_t* flag) {
  const int64_t total = n * classes;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; p < total; p += step) {
    const int64_t j = p / classes, c = p % classes;
    const int64_t v = idx[j];
    out[p] = static_cast<T>(v == c ? 1 : 0);
    if (c == 0 && out_of_range(v, classes)) flag_error(flag, DeviceErrorCode::LabelOutOfRange);
  }
}

template <typename U>
void launch_index_select(const void* x, int64_t outer, int64_t n_src, int64_t inner_u, const int64_t* idx,
                         int64_t n_idx, void* out, const LaunchScope& ls) {
  const int64_t total = outer * n_idx * inner_u;
  launch_kernel(TD_KERNEL(index_select_kernel<U>), grid_for(ceil_div(total, kThreads), ls.device()), kThreads, 0,
                ls.stream(), static_cast<const U*>(x), outer, n_src, inner_u, idx, n_idx, static_cast<U*>(out),
                device_error_flag(ls.device()));
  TD_CUDA_CHECK_LAUNCH(ls.stream(), "index_select_kernel");
}
}  // namespace

void CudaBackend::index_select(const IndexSelectArgs& args, const Stream& s) {
  if (args.outer * args.n_idx * args.inner == 0) return;
  LaunchScope ls(s);
  // Rows of inner elements are moved in the widest unit that divides them and suits both pointers.
  const int64_t row_bytes = args.inner * static_cast<int64_t>(dtype_size(args.t));
  auto fits = [&](int64_t unit) {
    return row_bytes % unit == 0 && is_aligned(args.x, unit) && is_aligned(args.out, unit);
  };
  if (fits(16))
    launch_index_select<uint4>(args.x, args.outer, args.n_src, row_bytes / 16, args.idx, args.n_idx, args.out, ls);
  else if (fits(8))
    launch_index_select<uint64_t>(args.x, args.outer, args.n_src, row_bytes / 8, args.idx, args.n_idx, args.out, ls);
  else if (fits(4))
    launch_index_select<uint32_t>(args.x, args.outer, args.n_src, row_bytes / 4, args.idx, args.n_idx, args.out, ls);
  else if (fits(2))
    launch_index_select<uint16_t>(args.x, args.outer, args.n_src, row_bytes / 2, args.idx, args.n_idx, args.out, ls);
  else
    launch_index_select<uint8_t>(args.x, args.outer, args.n_src, row_bytes, args.idx, args.n_idx, args.out, ls);
}

void CudaBackend::index_add(const IndexAddArgs& args, const Stream& s) {
  if (args.outer * args.n_idx * args.inner == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(
      args.t, "index_add",
      launch_add<scalar_t, false>(args.src, args.outer, args.n_idx, args.inner, args.idx, args.n_dst, args.dst, ls));
}

void CudaBackend::gather(const GatherArgs& args, const Stream& s) {
  const int64_t total = args.outer * args.n_idx * args.inner;
  if (total == 0) return;
  LaunchScope ls(s);
  int32_t* flag = device_error_flag(ls.device());
  TD_DISPATCH_BYTES(args.t, {
    launch_kernel(TD_KERNEL(gather_kernel<scalar_t>), grid_for(ceil_div(total, kThreads), ls.device()), kThreads, 0,
                  ls.stream(), static_cast<const scalar_t*>(args.x), args.outer, args.n_src, args.inner, args.idx,
                  args.n_idx, static_cast<scalar_t*>(args.out), flag);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "gather_kernel");
  });
}

void CudaBackend::scatter_add(const ScatterAddArgs& args, const Stream& s) {
  if (args.outer * args.n_idx * args.inner == 0) return;
  LaunchScope ls(s);
  TD_DISPATCH_FLOAT(
      args.t, "scatter_add",
      launch_add<scalar_t, true>(args.src, args.outer, args.n_idx, args.inner, args.idx, args.n_dst, args.dst, ls));
}

void CudaBackend::one_hot(const OneHotArgs& args, const Stream& s) {
  const int64_t total = args.n * args.classes;
  if (total == 0) return;
  LaunchScope ls(s);
  int32_t* flag = device_error_flag(ls.device());
  TD_DISPATCH_NUMERIC(args.t, "one_hot", {
    launch_kernel(TD_KERNEL(one_hot_kernel<scalar_t>), grid_for(ceil_div(total, kThreads), ls.device()), kThreads, 0,
                  ls.stream(), args.idx, args.n, args.classes, static_cast<scalar_t*>(args.out), flag);
    TD_CUDA_CHECK_LAUNCH(ls.stream(), "one_hot_kernel");
  });
}

}  // namespace cuda
}  // namespace tandem
