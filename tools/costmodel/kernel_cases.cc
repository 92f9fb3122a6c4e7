// kernels_bench's cases: operands made with Tandem's tensors, launches through the CUDA backend.
#include "tools/costmodel/kernel_cases.h"

#include "runtime/base/cuda_check.h"
#include "runtime/nn/nn_backend.h"
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
  return {{x, y},
          [=](const Stream& s) {
            cuda_backend().unary({UnaryOp::Relu, DType::F32, x.raw_data(), y.raw_data(), n, {}}, s);
          },
          2.0 * n * 4};
}

KernelRun binary_same_shape(int64_t n, BinaryOp op) {
  Tensor a = random_gpu({n}), b = random_gpu({n}), out = empty_gpu({n});
  const StridedDesc d = contiguous_desc({n});
  return {{a, b, out},
          [=](const Stream& s) {
            cuda_backend().binary({op, DType::F32, a.raw_data(), d, b.raw_data(), d, out.raw_data(), d}, s);
          },
          3.0 * n * 4};
}

// a [n / kRow, kRow] + bias [kRow] (broadcast over rows).
KernelRun add_row_broadcast(int64_t n) {
  const Shape shape{n / kRow, kRow};
  Tensor a = random_gpu(shape), b = random_gpu({kRow}), out = empty_gpu(shape);
  const StridedDesc ad = desc_of(a), bd = broadcast_desc(b, shape), od = desc_of(out);
  return {
      {a, b, out},
      [=](const Stream& s) {
        cuda_backend().binary({BinaryOp::Add, DType::F32, a.raw_data(), ad, b.raw_data(), bd, out.raw_data(), od}, s);
      },
      (2.0 * n + kRow) * 4};
}

// x [n / (64 * 1024), 64, 32, 32] * scale [1, 64, 1, 1] (per-channel, as in batch norm).
KernelRun mul_channel_broadcast(int64_t n) {
  const Shape shape{n / (64 * 1024), 64, 32, 32};
  Tensor a = random_gpu(shape), b = random_gpu({1, 64, 1, 1}), out = empty_gpu(shape);
  const StridedDesc ad = desc_of(a), bd = broadcast_desc(b, shape), od = desc_of(out);
  return {
      {a, b, out},
      [=](const Stream& s) {
        cuda_backend().binary({BinaryOp::Mul, DType::F32, a.raw_data(), ad, b.raw_data(), bd, out.raw_data(), od}, s);
      },
      (2.0 * n + 64) * 4};
}

KernelRun reduce_case(ReduceOp op, int64_t outer, int64_t r, int64_t inner) {
  Tensor x = random_gpu({outer * r * inner}), out = empty_gpu({outer * inner});
  Tensor idx = empty_gpu({outer * inner}, DType::I64);
  const bool with_indices = op != ReduceOp::Sum;
  return {{x, out, idx},
          [=](const Stream& s) {
            cuda_backend().reduce({op, DType::F32, x.raw_data(), outer, r, inner, out.raw_data(),
                                   with_indices ? static_cast<int64_t*>(idx.raw_data()) : nullptr},
                                  s);
          },
          4.0 * outer * r * inner + (with_indices ? 12.0 : 4.0) * outer * inner};
}

KernelRun softmax_rows(int64_t n, int64_t row, bool log) {
  Tensor x = random_gpu({n}), y = empty_gpu({n});
  return {{x, y},
          [=](const Stream& s) {
            cuda_backend().softmax({log, DType::F32, x.raw_data(), y.raw_data(), n / row, row, 1}, s);
          },
          2.0 * n * 4};
}

KernelRun softmax_backward(int64_t n) {
  Tensor y = random_gpu({n}), gy = random_gpu({n}), gx = empty_gpu({n});
  return {{y, gy, gx},
          [=](const Stream& s) {
            cuda_backend().softmax_backward(
                {false, DType::F32, y.raw_data(), gy.raw_data(), gx.raw_data(), n / kRow, kRow, 1}, s);
          },
          3.0 * n * 4};
}

KernelRun copy_contiguous(int64_t n) {
  Tensor x = random_gpu({n}), y = empty_gpu({n});
  const StridedDesc d = contiguous_desc({n});
  return {{x, y},
          [=](const Stream& s) {
            cuda_backend().copy({DType::F32, x.raw_data(), d, DType::F32, y.raw_data(), d}, s);
          },
          2.0 * n * 4};
}

// y = x.t().contiguous() for a square x.
KernelRun copy_transpose(int64_t n) {
  int64_t side = 1;
  while (side * side < n) side *= 2;
  Tensor x = random_gpu({side, side}), y = empty_gpu({side, side});
  const StridedDesc sd = desc_of(x.t()), dd = desc_of(y);
  return {{x, y},
          [=](const Stream& s) {
            cuda_backend().copy({DType::F32, x.raw_data(), sd, DType::F32, y.raw_data(), dd}, s);
          },
          2.0 * side * side * 4};
}

KernelRun cast_f32_to_bf16(int64_t n) {
  Tensor x = random_gpu({n}), y = empty_gpu({n}, DType::BF16);
  const StridedDesc d = contiguous_desc({n});
  return {{x, y},
          [=](const Stream& s) {
            cuda_backend().copy({DType::F32, x.raw_data(), d, DType::BF16, y.raw_data(), d}, s);
          },
          6.0 * n};
}

// ---- convolutional-network layers: [batch, 64, 56, 56], ResNet's stem pool, layout copies ----
// Bytes are each op's minimal traffic (every tensor read or written once), so a kernel that reads its input
// twice shows it as a lower percentage.

constexpr int64_t kChannels = 64, kSide = 56;

Tensor zeros_gpu(const Shape& shape, DType t = DType::F32) {
  Tensor z = empty_gpu(shape, t);
  TD_CUDA_CHECK(cudaMemsetAsync(z.raw_data(), 0, z.nbytes(), current_stream(gpu()).cuda()));
  return z;
}

// Batch norm (training) of x [batch, 64, 56, 56], NCHW or NHWC, forward or backward (after a forward that
// saves the statistics); fused: y = relu(batch_norm(x) + residual), ResNet's last batch norm of a block
// (batch_norm_act), whose forward also reads the residual and whose backward also reads y (the ReLU's mask) and
// writes the residual's gradient.
KernelRun batch_norm(int64_t batch, bool channels_last, bool backward, bool fused) {
  BatchNormGeometry g;
  g.channels_last = channels_last;
  g.n = batch;
  g.c = kChannels;
  g.hw = kSide * kSide;
  const int64_t n = batch * kChannels * kSide * kSide;
  Tensor x = random_gpu({n}), y = zeros_gpu({n}), dy = random_gpu({n}), dx = zeros_gpu({n});
  Tensor residual = fused ? random_gpu({n}) : Tensor(), dresidual = fused ? zeros_gpu({n}) : Tensor();
  Tensor weight = random_gpu({kChannels}), bias = random_gpu({kChannels});
  Tensor running_mean = zeros_gpu({kChannels}), running_var = zeros_gpu({kChannels});
  Tensor save_mean = zeros_gpu({kChannels}), save_invstd = zeros_gpu({kChannels});
  Tensor dweight = zeros_gpu({kChannels}), dbias = zeros_gpu({kChannels});
  auto forward = [=](const Stream& s) {
    const BatchNormTrainArgs a{g,
                               x.raw_data(),
                               weight.raw_data(),
                               bias.raw_data(),
                               1e-5,
                               0.1,
                               running_mean.raw_data(),
                               running_var.raw_data(),
                               y.raw_data(),
                               save_mean.raw_data(),
                               save_invstd.raw_data()};
    if (fused)
      nn_backend_for(gpu()).batch_norm_act_forward_train({a, residual.raw_data(), BnActivation::Relu}, s);
    else
      nn_backend_for(gpu()).batch_norm_forward_train(a, s);
  };
  std::vector<Tensor> all = {x,           y,         dy,          dx,      weight, bias, running_mean,
                             running_var, save_mean, save_invstd, dweight, dbias};
  if (fused) all.insert(all.end(), {residual, dresidual});
  const double extra = fused ? 1.0 : 0.0;  // the residual read forward; y read and dresidual written backward
  // Forward: x read, y written; weight, bias, running statistics (read and written), saved statistics.
  if (!backward) return {all, forward, 4.0 * ((2.0 + extra) * n + 8 * kChannels)};
  forward(current_stream(gpu()));
  // Backward: x and dy read, dx written; weight and saved statistics read, dweight and dbias written.
  return {all,
          [=](const Stream& s) {
            const BatchNormBackwardArgs a{g,
                                          true,
                                          x.raw_data(),
                                          dy.raw_data(),
                                          weight.raw_data(),
                                          save_mean.raw_data(),
                                          save_invstd.raw_data(),
                                          dx.raw_data(),
                                          dweight.raw_data(),
                                          dbias.raw_data()};
            if (fused)
              nn_backend_for(gpu()).batch_norm_act_backward(
                  {a, y.raw_data(), BnActivation::Relu, false, dresidual.raw_data()}, s);
            else
              nn_backend_for(gpu()).batch_norm_backward(a, s);
          },
          4.0 * ((3.0 + 2 * extra) * n + 5 * kChannels)};
}

// ResNet's stem pool: 3 x 3 windows, stride 2, padding 1, [batch, 64, 112, 112] -> [batch, 64, 56, 56].
Pool2dGeometry stem_pool(int64_t batch, bool channels_last) {
  Pool2dGeometry g;
  g.n = batch;
  g.c = kChannels;
  g.h = g.w = 2 * kSide;
  g.oh = g.ow = kSide;
  g.kernel_h = g.kernel_w = 3;
  g.stride_h = g.stride_w = 2;
  g.pad_h = g.pad_w = 1;
  g.channels_last = channels_last;
  return g;
}

KernelRun max_pool(int64_t batch, bool channels_last, bool backward) {
  const Pool2dGeometry g = stem_pool(batch, channels_last);
  const int64_t in = g.n * g.c * g.h * g.w, out = g.n * g.c * g.oh * g.ow;
  Tensor x = random_gpu({in}), y = zeros_gpu({out}), idx = zeros_gpu({out}, DType::I32);
  if (!backward)  // x read; y and the i32 indices written
    return {{x, y, idx},
            [=](const Stream& s) {
              nn_backend_for(gpu()).max_pool2d_forward(
                  {g, x.raw_data(), y.raw_data(), static_cast<int32_t*>(idx.raw_data())}, s);
            },
            4.0 * (in + 2.0 * out)};
  nn_backend_for(gpu()).max_pool2d_forward({g, x.raw_data(), y.raw_data(), static_cast<int32_t*>(idx.raw_data())},
                                           current_stream(gpu()));
  Tensor dy = random_gpu({out}), dx = zeros_gpu({in});
  return {{x, y, idx, dy, dx},  // dy and the indices read; dx written
          [=](const Stream& s) {
            nn_backend_for(gpu()).max_pool2d_backward(
                {g, dy.raw_data(), static_cast<const int32_t*>(idx.raw_data()), dx.raw_data()}, s);
          },
          4.0 * (2.0 * out + in)};
}

KernelRun avg_pool(int64_t batch, bool channels_last, bool backward) {
  const Pool2dGeometry g = stem_pool(batch, channels_last);
  const int64_t in = g.n * g.c * g.h * g.w, out = g.n * g.c * g.oh * g.ow;
  Tensor a = random_gpu({backward ? out : in}), b = zeros_gpu({backward ? in : out});
  return {{a, b},
          [=](const Stream& s) {
            if (backward)
              nn_backend_for(gpu()).avg_pool2d_backward({g, a.raw_data(), b.raw_data()}, s);
            else
              nn_backend_for(gpu()).avg_pool2d_forward({g, a.raw_data(), b.raw_data()}, s);
          },
          4.0 * (in + out)};
}

// The copy that changes x [batch, 64, 56, 56] from one memory format to the other.
KernelRun layout_copy(int64_t batch, bool to_channels_last) {
  const Shape nchw{batch, kChannels, kSide, kSide}, nhwc{batch, kSide, kSide, kChannels};
  Tensor x = random_gpu(to_channels_last ? nchw : nhwc), y = empty_gpu(to_channels_last ? nhwc : nchw);
  // The source seen in the destination's dim order.
  const StridedDesc sd = desc_of(to_channels_last ? x.permute({0, 2, 3, 1}) : x.permute({0, 3, 1, 2}));
  const StridedDesc dd = desc_of(y);
  return {{x, y},
          [=](const Stream& s) {
            cuda_backend().copy({DType::F32, x.raw_data(), sd, DType::F32, y.raw_data(), dd}, s);
          },
          2.0 * x.numel() * 4};
}

KernelCase layer_case(const std::string& name, std::function<KernelRun(int64_t)> make) {
  KernelCase c{name, std::move(make)};
  c.arg_name = "batch";
  c.args = {4, 256};  // 0.8M and 51M elements
  c.record_arg = 1;
  return c;
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
      layer_case("batch_norm_forward_train_nchw", [](int64_t b) { return batch_norm(b, false, false, false); }),
      layer_case("batch_norm_forward_train_nhwc", [](int64_t b) { return batch_norm(b, true, false, false); }),
      layer_case("batch_norm_backward_nchw", [](int64_t b) { return batch_norm(b, false, true, false); }),
      layer_case("batch_norm_backward_nhwc", [](int64_t b) { return batch_norm(b, true, true, false); }),
      layer_case("batch_norm_add_relu_forward_train_nchw", [](int64_t b) { return batch_norm(b, false, false, true); }),
      layer_case("batch_norm_add_relu_forward_train_nhwc", [](int64_t b) { return batch_norm(b, true, false, true); }),
      layer_case("batch_norm_add_relu_backward_nchw", [](int64_t b) { return batch_norm(b, false, true, true); }),
      layer_case("batch_norm_add_relu_backward_nhwc", [](int64_t b) { return batch_norm(b, true, true, true); }),
      layer_case("max_pool_stem_forward_nchw", [](int64_t b) { return max_pool(b, false, false); }),
      layer_case("max_pool_stem_forward_nhwc", [](int64_t b) { return max_pool(b, true, false); }),
      layer_case("max_pool_stem_backward_nchw", [](int64_t b) { return max_pool(b, false, true); }),
      layer_case("max_pool_stem_backward_nhwc", [](int64_t b) { return max_pool(b, true, true); }),
      layer_case("avg_pool_stem_forward_nchw", [](int64_t b) { return avg_pool(b, false, false); }),
      layer_case("avg_pool_stem_forward_nhwc", [](int64_t b) { return avg_pool(b, true, false); }),
      layer_case("avg_pool_stem_backward_nchw", [](int64_t b) { return avg_pool(b, false, true); }),
      layer_case("avg_pool_stem_backward_nhwc", [](int64_t b) { return avg_pool(b, true, true); }),
      layer_case("copy_nchw_to_nhwc", [](int64_t b) { return layout_copy(b, true); }),
      layer_case("copy_nhwc_to_nchw", [](int64_t b) { return layout_copy(b, false); }),
  };
  return cases;
}

}  // namespace costmodel
}  // namespace tandem
