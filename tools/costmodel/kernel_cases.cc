// kernels_bench's cases: operands made with Tandem's tensors, launches through the CUDA backend.
#include "tools/costmodel/kernel_cases.h"

#include "runtime/tensor/backend.h"
#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {
namespace costmodel {

namespace {

constexpr int64_t kRow = 1024;  // row length of the 2-D cases

Device gpu() { return Device::cuda(0); }
Backend& cuda_backend() { return backend_for(gpu()); }

Tensor random_gpu(const Shape& shape, DType t = DType::F32) {
  static Generator gen(20240611);
  Tensor x = empty(shape, TensorOptions(DType::F32).with_device(gpu()));
  uniform_(x, -2.0, 2.0, gen);
  return t == DType::F32 ? x : x.to(t);
}

Tensor empty_gpu(const Shape& shape, DType t = DType::F32) { return empty(shape, TensorOptions(t).with_device(gpu())); }

StridedDesc contiguous_desc(const Shape& shape) {
  StridedDesc d;
  d.ndim = static_cast<int>(shape.size());
  int64_t stride = 1;
  for (int i = d.ndim - 1; i >= 0; --i) {
    d.shape[i] = shape[i];
    d.strides[i] = stride;
    stride *= shape[i];
  }
  return d;
}

KernelRun relu(int64_t n) {
  Tensor x = random_gpu({n}), y = empty_gpu({n});
  return {
      {x, y},
      [=](const Stream& s) { cuda_backend().unary(UnaryOp::Relu, DType::F32, x.raw_data(), y.raw_data(), n, {}, s); },
      2.0 * n * 4};
}

KernelRun binary_same_shape(int64_t n, BinaryOp op) {
  Tensor a = random_gpu({n}), b = random_gpu({n}), out = empty_gpu({n});
  const StridedDesc d = contiguous_desc({n});
  return {{a, b, out},
          [=](const Stream& s) {
            cuda_backend().binary(op, DType::F32, a.raw_data(), d, b.raw_data(), d, out.raw_data(), d, s);
          },
          3.0 * n * 4};
}

// a [n / kRow, kRow] + bias [kRow] (broadcast over rows).
KernelRun add_row_broadcast(int64_t n) {
  const Shape shape{n / kRow, kRow};
  Tensor a = random_gpu(shape), b = random_gpu({kRow}), out = empty_gpu(shape);
  const StridedDesc ad = desc_of(a), bd = broadcast_desc(b, shape), od = desc_of(out);
  return {{a, b, out},
          [=](const Stream& s) {
            cuda_backend().binary(BinaryOp::Add, DType::F32, a.raw_data(), ad, b.raw_data(), bd, out.raw_data(), od, s);
          },
          (2.0 * n + kRow) * 4};
}

// x [n / (64 * 1024), 64, 32, 32] * scale [1, 64, 1, 1] (per-channel, as in batch norm).
KernelRun mul_channel_broadcast(int64_t n) {
  const Shape shape{n / (64 * 1024), 64, 32, 32};
  Tensor a = random_gpu(shape), b = random_gpu({1, 64, 1, 1}), out = empty_gpu(shape);
  const StridedDesc ad = desc_of(a), bd = broadcast_desc(b, shape), od = desc_of(out);
  return {{a, b, out},
          [=](const Stream& s) {
            cuda_backend().binary(BinaryOp::Mul, DType::F32, a.raw_data(), ad, b.raw_data(), bd, out.raw_data(), od, s);
          },
          (2.0 * n + 64) * 4};
}

KernelRun reduce_case(ReduceOp op, int64_t outer, int64_t r, int64_t inner) {
  Tensor x = random_gpu({outer * r * inner}), out = empty_gpu({outer * inner});
  Tensor idx = empty_gpu({outer * inner}, DType::I64);
  const bool with_indices = op != ReduceOp::Sum;
  return {{x, out, idx},
          [=](const Stream& s) {
            cuda_backend().reduce(op, DType::F32, x.raw_data(), outer, r, inner, out.raw_data(),
                                  with_indices ? static_cast<int64_t*>(idx.raw_data()) : nullptr, s);
          },
          4.0 * outer * r * inner + (with_indices ? 12.0 : 4.0) * outer * inner};
}

KernelRun softmax_rows(int64_t n, int64_t row, bool log) {
  Tensor x = random_gpu({n}), y = empty_gpu({n});
  return {
      {x, y},
      [=](const Stream& s) { cuda_backend().softmax(log, DType::F32, x.raw_data(), y.raw_data(), n / row, row, 1, s); },
      2.0 * n * 4};
}

KernelRun softmax_backward(int64_t n) {
  Tensor y = random_gpu({n}), gy = random_gpu({n}), gx = empty_gpu({n});
  return {{y, gy, gx},
          [=](const Stream& s) {
            cuda_backend().softmax_backward(false, DType::F32, y.raw_data(), gy.raw_data(), gx.raw_data(), n / kRow,
                                            kRow, 1, s);
          },
          3.0 * n * 4};
}

KernelRun copy_contiguous(int64_t n) {
  Tensor x = random_gpu({n}), y = empty_gpu({n});
  const StridedDesc d = contiguous_desc({n});
  return {{x, y},
          [=](const Stream& s) { cuda_backend().copy(DType::F32, x.raw_data(), d, DType::F32, y.raw_data(), d, s); },
          2.0 * n * 4};
}

// y = x.t().contiguous() for a square x.
KernelRun copy_transpose(int64_t n) {
  int64_t side = 1;
  while (side * side < n) side *= 2;
  Tensor x = random_gpu({side, side}), y = empty_gpu({side, side});
  const StridedDesc sd = desc_of(x.t()), dd = desc_of(y);
  return {{x, y},
          [=](const Stream& s) { cuda_backend().copy(DType::F32, x.raw_data(), sd, DType::F32, y.raw_data(), dd, s); },
          2.0 * side * side * 4};
}

KernelRun cast_f32_to_bf16(int64_t n) {
  Tensor x = random_gpu({n}), y = empty_gpu({n}, DType::BF16);
  const StridedDesc d = contiguous_desc({n});
  return {{x, y},
          [=](const Stream& s) { cuda_backend().copy(DType::F32, x.raw_data(), d, DType::BF16, y.raw_data(), d, s); },
          6.0 * n};
}

}  // namespace

const std::vector<KernelCase>& kernel_cases() {
  static const std::vector<KernelCase> cases = {
      {"relu", relu},
      {"add", [](int64_t n) { return binary_same_shape(n, BinaryOp::Add); }},
      {"mul", [](int64_t n) { return binary_same_shape(n, BinaryOp::Mul); }},
      {"add_row_broadcast", add_row_broadcast},
      {"mul_channel_broadcast", mul_channel_broadcast},
      {"sum_rows", [](int64_t n) { return reduce_case(ReduceOp::Sum, n / kRow, kRow, 1); }},
      {"sum_all", [](int64_t n) { return reduce_case(ReduceOp::Sum, 1, n, 1); }},
      {"sum_columns", [](int64_t n) { return reduce_case(ReduceOp::Sum, 1, n / kRow, kRow); }},
      {"max_rows", [](int64_t n) { return reduce_case(ReduceOp::Max, n / kRow, kRow, 1); }},
      {"softmax", [](int64_t n) { return softmax_rows(n, kRow, false); }},
      {"log_softmax_long_rows", [](int64_t n) { return softmax_rows(n, 16384, true); }},
      {"softmax_backward", softmax_backward},
      {"copy_contiguous", copy_contiguous},
      {"copy_transpose", copy_transpose},
      {"cast_f32_to_bf16", cast_f32_to_bf16},
  };
  return cases;
}

}  // namespace costmodel
}  // namespace tandem
