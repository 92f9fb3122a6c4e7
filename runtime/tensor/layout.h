// Dense layouts: which tensors fill their memory without gaps in some order of their dims, kernel descriptors in a
// layout's memory order, and the count of copies that change a dense tensor's layout (for tests).
#pragma once

#include <cstdint>
#include <vector>

#include "runtime/tensor/backend.h"
#include "runtime/tensor/tensor.h"

namespace tandem {

// Whether t's elements fill numel() consecutive elements of memory from raw_data(), in some order of its dims
// (PyTorch's non-overlapping and dense): contiguous, channels-last and any permutation of a contiguous tensor are;
// slices with gaps, broadcast views and empty tensors are not. Strides of size-1 dims do not matter.
bool is_dense(const Tensor& t);
bool is_dense(const Shape& shape, const Shape& strides);
// Whether a and b are both dense with the same shape and the same strides on every dim of size > 1: their memory
// holds the elements in the same order, so elementwise kernels may read them as flat arrays.
bool same_layout(const Tensor& a, const Tensor& b);
// t (of ref's shape) in ref's layout (contiguous when ref is not dense): t itself when it already is, else a copy
// (no autograd).
Tensor in_layout_of(const Tensor& t, const Tensor& ref);
// t's dims from the outermost to the innermost in memory (strides descending; ties, which only size-1 dims and
// broadcast dims have, in dim order).
std::vector<int> memory_order(const Tensor& t);
// d with its dims permuted: dim i of the result is dim order[i] of d.
StridedDesc permute_desc(const StridedDesc& d, const std::vector<int>& order);

// Copies of a dense tensor into a dense tensor of another layout (Tensor::copy_ counts them; contiguous(),
// clone() of another layout, to_channels_last and to_nchw copy through it). Process-wide, for tests that check a
// model runs without layout conversions.
int64_t layout_conversion_count();
void count_layout_conversion();

}  // namespace tandem
