// Memory-format helpers of the NN op front end: dense operands and outputs in NCHW or channels-last order.
#pragma once

#include "runtime/tensor/tensor.h"

namespace tandem {

// An uninitialized tensor of `shape` (4-D when channels_last) dense in that memory order.
Tensor empty_in_format(const Shape& shape, TensorOptions opts, bool channels_last);
// t itself when already dense in that order (NCHW: contiguous), else a copy that is (no autograd).
Tensor dense_in_format(const Tensor& t, bool channels_last);

}  // namespace tandem
