// Iteration over K strided operands of one shape on the host (the CPU kernels' loops, the CUDA launches'
// dimension merging): dims that are contiguous for every operand
// are merged, then the innermost dim is handed to a tight loop.
#pragma once

#include <array>
#include <cstdint>

#include "runtime/tensor/backend.h"

namespace tandem {
namespace strided {

template <int K>
struct StridedIter {
  int ndim = 0;
  int64_t shape[kMaxDims] = {};
  int64_t strides[K][kMaxDims] = {};
};

template <int K>
StridedIter<K> make_iter(const std::array<const StridedDesc*, K>& descs) {
  StridedIter<K> it;
  const StridedDesc& d0 = *descs[0];
  // Drop size-1 dims, then merge dim i into i+1 when every operand steps by shape[i+1]*stride[i+1].
  for (int i = 0; i < d0.ndim; ++i) {
    if (d0.shape[i] == 1) continue;
    if (it.ndim > 0) {
      int last = it.ndim - 1;
      bool mergeable = true;
      for (int k = 0; k < K; ++k)
        if (it.strides[k][last] != descs[k]->strides[i] * d0.shape[i]) mergeable = false;
      if (mergeable) {
        it.shape[last] *= d0.shape[i];
        for (int k = 0; k < K; ++k) it.strides[k][last] = descs[k]->strides[i];
        continue;
      }
    }
    it.shape[it.ndim] = d0.shape[i];
    for (int k = 0; k < K; ++k) it.strides[k][it.ndim] = descs[k]->strides[i];
    ++it.ndim;
  }
  if (it.ndim == 0) {  // a single element
    it.ndim = 1;
    it.shape[0] = 1;
    for (int k = 0; k < K; ++k) it.strides[k][0] = 1;
  }
  return it;
}

// Calls f(offsets, n, inner_strides) for each run along the innermost dim, in row-major order.
template <int K, typename F>
void for_each_run(const StridedIter<K>& it, F&& f) {
  int inner = it.ndim - 1;
  int64_t runs = 1;
  for (int i = 0; i < inner; ++i) runs *= it.shape[i];
  int64_t inner_strides[K];
  for (int k = 0; k < K; ++k) inner_strides[k] = it.strides[k][inner];
  int64_t idx[kMaxDims] = {};
  int64_t off[K] = {};
  for (int64_t r = 0; r < runs; ++r) {
    f(off, it.shape[inner], inner_strides);
    // Advance the odometer over the outer dims.
    for (int d = inner - 1; d >= 0; --d) {
      ++idx[d];
      for (int k = 0; k < K; ++k) off[k] += it.strides[k][d];
      if (idx[d] < it.shape[d]) break;
      for (int k = 0; k < K; ++k) off[k] -= it.strides[k][d] * it.shape[d];
      idx[d] = 0;
    }
  }
}

}  // namespace strided
}  // namespace tandem
