// Helpers turning Tensors into the StridedDesc arguments kernels take (used by the op front end).
#pragma once

#include "runtime/tensor/backend.h"
#include "runtime/tensor/tensor.h"

namespace tandem {

// The tensor's own shape and strides.
StridedDesc desc_of(const Tensor& t);
// The tensor described in the broadcast shape `out` (stride 0 on broadcast dims); throws ShapeError.
StridedDesc broadcast_desc(const Tensor& t, const Shape& out);
// The NumPy broadcast of two shapes; throws ShapeError naming `op` when they do not broadcast.
Shape broadcast_shapes(const Shape& a, const Shape& b, const char* op);
// Throws DeviceError / DTypeError unless all tensors are defined and share device (and dtype if asked).
void check_same_device(const std::vector<Tensor>& ts, const char* op);
void check_same_dtype(const std::vector<Tensor>& ts, const char* op);
void check_float(const Tensor& t, const char* op);  // f32 or f64
// f32, f64 or bf16: ops whose kernels store bf16 and compute in f32 (unary and binary arithmetic).
void check_float_or_bf16(const Tensor& t, const char* op);
// The backend of t's device.
Backend& backend_of(const Tensor& t);

}  // namespace tandem
