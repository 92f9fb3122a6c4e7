// Microbenchmarks of the CUDA backend's memory-bound kernels: elementwise, reductions, softmax, copies,
// batch norm, pooling and layout copies, timed with CUDA events and reported as bytes/s and as a percentage
// of the device's copy bandwidth (a large device-to-device cudaMemcpyAsync, bytes read + written), measured
// once at start-up.
// Goals on an H100/H200: >= 85% of copy bandwidth for elementwise, >= 80% for reductions, softmax and
// transposing copies.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <functional>
#include <string>

#include "runtime/base/cuda_check.h"
#include "runtime/base/device.h"
#include "runtime/memory/stream.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/tensor/backend.h"
#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"
#include "runtime/tensor/tensor_desc.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

constexpr int64_t kMid = int64_t{1} << 20;
constexpr int64_t kLarge = int64_t{1} << 26;
constexpr int64_t kRow = 1024;  // row length of the 2-D cases
// Batches of the layer cases ([batch, 64, 56, 56]: 0.8M and 51M elements).
constexpr int64_t kSmallBatch = 4;
constexpr int64_t kLargeBatch = 256;

double g_copy_bytes_per_s = 0;  // read + written

Device gpu() { return Device::cuda(0); }
Backend& cuda_backend() { return backend_for(gpu()); }

Tensor random_gpu(const Shape& shape, DType t = DType::F32) {
  static Generator gen(20240611);
  Tensor x = empty(shape, TensorOptions(DType::F32).with_device(gpu()));
  uniform_(x, -2.0, 2.0, gen);
  return t == DType::F32 ? x : x.to(t);
}

// Times `launch` (queued on the current stream) with CUDA events, after a warm-up; `bytes` is the minimal
// traffic of one launch (bytes read + bytes written).
void run_timed(benchmark::State& state, double bytes, const std::function<void(const Stream&)>& launch) {
  Stream s = current_stream(gpu());
  for (int i = 0; i < 3; ++i) launch(s);
  s.synchronize();
  Event start(true), stop(true);
  double total_s = 0;
  for (auto _ : state) {
    start.record(s);
    launch(s);
    stop.record(s);
    stop.synchronize();
    const double sec = start.elapsed_ms(stop) * 1e-3;
    state.SetIterationTime(sec);
    total_s += sec;
  }
  const double iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(bytes * iters));
  state.counters["pct_of_copy_bw"] = 100.0 * bytes * iters / total_s / g_copy_bytes_per_s;
}

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

// ---- elementwise ----

void BM_Relu(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor x = random_gpu({n}), y = empty({n}, TensorOptions().with_device(gpu()));
  run_timed(state, 2.0 * n * 4, [&](const Stream& s) {
    cuda_backend().unary({UnaryOp::Relu, DType::F32, x.raw_data(), y.raw_data(), n, {}}, s);
  });
}

void binary_same_shape(benchmark::State& state, BinaryOp op) {
  const int64_t n = state.range(0);
  Tensor a = random_gpu({n}), b = random_gpu({n}), out = empty({n}, TensorOptions().with_device(gpu()));
  const StridedDesc d = contiguous_desc({n});
  run_timed(state, 3.0 * n * 4, [&](const Stream& s) {
    cuda_backend().binary({op, DType::F32, a.raw_data(), d, b.raw_data(), d, out.raw_data(), d}, s);
  });
}
void BM_Add(benchmark::State& state) { binary_same_shape(state, BinaryOp::Add); }
void BM_Mul(benchmark::State& state) { binary_same_shape(state, BinaryOp::Mul); }

// a [n / kRow, kRow] + bias [kRow] (broadcast over rows).
void BM_AddRowBroadcast(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Shape shape{n / kRow, kRow};
  Tensor a = random_gpu(shape), b = random_gpu({kRow}), out = empty(shape, TensorOptions().with_device(gpu()));
  const StridedDesc ad = desc_of(a), bd = broadcast_desc(b, shape), od = desc_of(out);
  run_timed(state, (2.0 * n + kRow) * 4, [&](const Stream& s) {
    cuda_backend().binary({BinaryOp::Add, DType::F32, a.raw_data(), ad, b.raw_data(), bd, out.raw_data(), od}, s);
  });
}

// x [n / (64 * 1024), 64, 32, 32] * scale [1, 64, 1, 1] (per-channel, as in batch norm).
void BM_MulChannelBroadcast(benchmark::State& state) {
  const int64_t n = state.range(0);
  const Shape shape{n / (64 * 1024), 64, 32, 32};
  Tensor a = random_gpu(shape), b = random_gpu({1, 64, 1, 1}), out = empty(shape, TensorOptions().with_device(gpu()));
  const StridedDesc ad = desc_of(a), bd = broadcast_desc(b, shape), od = desc_of(out);
  run_timed(state, (2.0 * n + 64) * 4, [&](const Stream& s) {
    cuda_backend().binary({BinaryOp::Mul, DType::F32, a.raw_data(), ad, b.raw_data(), bd, out.raw_data(), od}, s);
  });
}

// ---- reductions and softmax ----

void reduce_case(benchmark::State& state, ReduceOp op, int64_t outer, int64_t r, int64_t inner) {
  Tensor x = random_gpu({outer * r * inner});
  Tensor out = empty({outer * inner}, TensorOptions().with_device(gpu()));
  Tensor idx = empty({outer * inner}, TensorOptions(DType::I64).with_device(gpu()));
  const bool with_indices = op != ReduceOp::Sum;
  const double bytes = 4.0 * outer * r * inner + (with_indices ? 12.0 : 4.0) * outer * inner;
  run_timed(state, bytes, [&](const Stream& s) {
    cuda_backend().reduce(
        {op, DType::F32, x.raw_data(), outer, r, inner, out.raw_data(), with_indices ? idx.data<int64_t>() : nullptr},
        s);
  });
}
void BM_SumRows(benchmark::State& state) { reduce_case(state, ReduceOp::Sum, state.range(0) / kRow, kRow, 1); }
void BM_SumAll(benchmark::State& state) { reduce_case(state, ReduceOp::Sum, 1, state.range(0), 1); }
void BM_SumColumns(benchmark::State& state) { reduce_case(state, ReduceOp::Sum, 1, state.range(0) / kRow, kRow); }
void BM_MaxRows(benchmark::State& state) { reduce_case(state, ReduceOp::Max, state.range(0) / kRow, kRow, 1); }

void softmax_rows(benchmark::State& state, int64_t row, bool log) {
  const int64_t n = state.range(0);
  Tensor x = random_gpu({n}), y = empty({n}, TensorOptions().with_device(gpu()));
  run_timed(state, 2.0 * n * 4, [&](const Stream& s) {
    cuda_backend().softmax({log, DType::F32, x.raw_data(), y.raw_data(), n / row, row, 1}, s);
  });
}
void BM_Softmax(benchmark::State& state) { softmax_rows(state, kRow, false); }
void BM_LogSoftmaxLongRows(benchmark::State& state) { softmax_rows(state, 16384, true); }

void BM_SoftmaxBackward(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor y = random_gpu({n}), gy = random_gpu({n}), gx = empty({n}, TensorOptions().with_device(gpu()));
  run_timed(state, 3.0 * n * 4, [&](const Stream& s) {
    cuda_backend().softmax_backward({false, DType::F32, y.raw_data(), gy.raw_data(), gx.raw_data(), n / kRow, kRow, 1},
                                    s);
  });
}

// ---- copies ----

void BM_CopyContiguous(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor x = random_gpu({n}), y = empty({n}, TensorOptions().with_device(gpu()));
  const StridedDesc d = contiguous_desc({n});
  run_timed(state, 2.0 * n * 4, [&](const Stream& s) {
    cuda_backend().copy({DType::F32, x.raw_data(), d, DType::F32, y.raw_data(), d}, s);
  });
}

// y = x.t().contiguous() for a square x.
void BM_CopyTranspose(benchmark::State& state) {
  const int64_t n = state.range(0);
  int64_t side = 1;
  while (side * side < n) side *= 2;
  Tensor x = random_gpu({side, side}), y = empty({side, side}, TensorOptions().with_device(gpu()));
  const StridedDesc sd = desc_of(x.t()), dd = desc_of(y);
  run_timed(state, 2.0 * side * side * 4, [&](const Stream& s) {
    cuda_backend().copy({DType::F32, x.raw_data(), sd, DType::F32, y.raw_data(), dd}, s);
  });
}

void BM_CastF32ToBF16(benchmark::State& state) {
  const int64_t n = state.range(0);
  Tensor x = random_gpu({n}), y = empty({n}, TensorOptions(DType::BF16).with_device(gpu()));
  const StridedDesc d = contiguous_desc({n});
  run_timed(state, 6.0 * n, [&](const Stream& s) {
    cuda_backend().copy({DType::F32, x.raw_data(), d, DType::BF16, y.raw_data(), d}, s);
  });
}

// ---- convolutional-network layers: [batch, 64, 56, 56], ResNet's stem pool, layout copies ----
// The batch is the benchmark's argument; bytes are each op's minimal traffic (every tensor read or written
// once), so a kernel that reads its input twice shows it as a lower percentage.

constexpr int64_t kChannels = 64, kSide = 56;

Tensor zeros_gpu(const Shape& shape, DType t = DType::F32) {
  Tensor z = empty(shape, TensorOptions(t).with_device(gpu()));
  TD_CUDA_CHECK(cudaMemsetAsync(z.raw_data(), 0, z.nbytes(), current_stream(gpu()).cuda()));
  return z;
}

// Batch norm (training) of x [batch, 64, 56, 56], NCHW or NHWC: per-channel parameters and statistics.
struct BatchNormCase {
  BatchNormGeometry g;
  Tensor x, y, dy, dx, weight, bias, running_mean, running_var, save_mean, save_invstd, dweight, dbias;
  explicit BatchNormCase(int64_t batch, bool channels_last) {
    g.channels_last = channels_last;
    g.n = batch;
    g.c = kChannels;
    g.hw = kSide * kSide;
    const int64_t n = batch * kChannels * kSide * kSide;
    x = random_gpu({n});
    y = zeros_gpu({n});
    dy = random_gpu({n});
    dx = zeros_gpu({n});
    weight = random_gpu({kChannels});
    bias = random_gpu({kChannels});
    running_mean = zeros_gpu({kChannels});
    running_var = zeros_gpu({kChannels});
    save_mean = zeros_gpu({kChannels});
    save_invstd = zeros_gpu({kChannels});
    dweight = zeros_gpu({kChannels});
    dbias = zeros_gpu({kChannels});
  }
  int64_t numel() const { return x.numel(); }
  void forward(const Stream& s) {
    nn_backend_for(gpu()).batch_norm_forward_train(
        {g, x.raw_data(), weight.raw_data(), bias.raw_data(), 1e-5, 0.1, running_mean.raw_data(),
         running_var.raw_data(), y.raw_data(), save_mean.raw_data(), save_invstd.raw_data()},
        s);
  }
  void backward(const Stream& s) {
    nn_backend_for(gpu()).batch_norm_backward(
        {g, true, x.raw_data(), dy.raw_data(), weight.raw_data(), save_mean.raw_data(), save_invstd.raw_data(),
         dx.raw_data(), dweight.raw_data(), dbias.raw_data()},
        s);
  }
};

void batch_norm_forward(benchmark::State& state, bool channels_last) {
  BatchNormCase c(state.range(0), channels_last);
  // x read, y written; weight, bias, running statistics (read and written) and the saved statistics.
  run_timed(state, 4.0 * (2.0 * c.numel() + 8 * kChannels), [&](const Stream& s) { c.forward(s); });
}
void batch_norm_backward(benchmark::State& state, bool channels_last) {
  BatchNormCase c(state.range(0), channels_last);
  c.forward(current_stream(gpu()));  // the saved statistics
  // x and dy read, dx written; weight and saved statistics read, dweight and dbias written.
  run_timed(state, 4.0 * (3.0 * c.numel() + 5 * kChannels), [&](const Stream& s) { c.backward(s); });
}
void BM_BatchNormForwardNchw(benchmark::State& state) { batch_norm_forward(state, false); }
void BM_BatchNormForwardNhwc(benchmark::State& state) { batch_norm_forward(state, true); }
void BM_BatchNormBackwardNchw(benchmark::State& state) { batch_norm_backward(state, false); }
void BM_BatchNormBackwardNhwc(benchmark::State& state) { batch_norm_backward(state, true); }

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

void max_pool(benchmark::State& state, bool channels_last, bool backward) {
  const Pool2dGeometry g = stem_pool(state.range(0), channels_last);
  const int64_t in = g.n * g.c * g.h * g.w, out = g.n * g.c * g.oh * g.ow;
  Tensor x = random_gpu({in}), y = zeros_gpu({out}), idx = zeros_gpu({out}, DType::I32);
  NNBackend& nn = nn_backend_for(gpu());
  if (!backward) {
    // x read; y and the i32 indices written.
    run_timed(state, 4.0 * (in + 2.0 * out), [&](const Stream& s) {
      nn.max_pool2d_forward({g, x.raw_data(), y.raw_data(), idx.data<int32_t>()}, s);
    });
    return;
  }
  nn.max_pool2d_forward({g, x.raw_data(), y.raw_data(), idx.data<int32_t>()}, current_stream(gpu()));
  Tensor dy = random_gpu({out}), dx = zeros_gpu({in});
  // dy and the indices read; dx written.
  run_timed(state, 4.0 * (2.0 * out + in), [&](const Stream& s) {
    nn.max_pool2d_backward({g, dy.raw_data(), idx.data<int32_t>(), dx.raw_data()}, s);
  });
}
void avg_pool(benchmark::State& state, bool channels_last, bool backward) {
  const Pool2dGeometry g = stem_pool(state.range(0), channels_last);
  const int64_t in = g.n * g.c * g.h * g.w, out = g.n * g.c * g.oh * g.ow;
  Tensor a = random_gpu({backward ? out : in}), b = zeros_gpu({backward ? in : out});
  NNBackend& nn = nn_backend_for(gpu());
  run_timed(state, 4.0 * (in + out), [&](const Stream& s) {
    if (backward)
      nn.avg_pool2d_backward({g, a.raw_data(), b.raw_data()}, s);
    else
      nn.avg_pool2d_forward({g, a.raw_data(), b.raw_data()}, s);
  });
}
void BM_MaxPoolForwardNchw(benchmark::State& state) { max_pool(state, false, false); }
void BM_MaxPoolForwardNhwc(benchmark::State& state) { max_pool(state, true, false); }
void BM_MaxPoolBackwardNchw(benchmark::State& state) { max_pool(state, false, true); }
void BM_MaxPoolBackwardNhwc(benchmark::State& state) { max_pool(state, true, true); }
void BM_AvgPoolForwardNchw(benchmark::State& state) { avg_pool(state, false, false); }
void BM_AvgPoolForwardNhwc(benchmark::State& state) { avg_pool(state, true, false); }
void BM_AvgPoolBackwardNchw(benchmark::State& state) { avg_pool(state, false, true); }
void BM_AvgPoolBackwardNhwc(benchmark::State& state) { avg_pool(state, true, true); }

// The copy that changes x [batch, 64, 56, 56] from one memory format to the other.
void layout_copy(benchmark::State& state, bool to_channels_last) {
  const Shape nchw{state.range(0), kChannels, kSide, kSide}, nhwc{state.range(0), kSide, kSide, kChannels};
  Tensor x = random_gpu(to_channels_last ? nchw : nhwc),
         y = empty(to_channels_last ? nhwc : nchw, TensorOptions().with_device(gpu()));
  // The source seen in the destination's dim order.
  const StridedDesc sd = desc_of(to_channels_last ? x.permute({0, 2, 3, 1}) : x.permute({0, 3, 1, 2}));
  const StridedDesc dd = desc_of(y);
  run_timed(state, 2.0 * x.numel() * 4, [&](const Stream& s) {
    cuda_backend().copy({DType::F32, x.raw_data(), sd, DType::F32, y.raw_data(), dd}, s);
  });
}
void BM_CopyNchwToNhwc(benchmark::State& state) { layout_copy(state, true); }
void BM_CopyNhwcToNchw(benchmark::State& state) { layout_copy(state, false); }

// Device-to-device copy bandwidth (bytes read + written per second) of a 1 GiB cudaMemcpyAsync.
double measure_copy_bandwidth() {
  const int64_t bytes = int64_t{1} << 30;
  Tensor a = empty({bytes}, TensorOptions(DType::U8).with_device(gpu()));
  Tensor b = empty({bytes}, TensorOptions(DType::U8).with_device(gpu()));
  Stream s = current_stream(gpu());
  auto copy = [&] {
    TD_CUDA_CHECK(cudaMemcpyAsync(b.raw_data(), a.raw_data(), bytes, cudaMemcpyDeviceToDevice, s.cuda()));
  };
  for (int i = 0; i < 3; ++i) copy();
  Event start(true), stop(true);
  constexpr int kReps = 20;
  start.record(s);
  for (int i = 0; i < kReps; ++i) copy();
  stop.record(s);
  stop.synchronize();
  return 2.0 * bytes * kReps / (start.elapsed_ms(stop) * 1e-3);
}

void register_benchmarks() {
  struct Entry {
    const char* name;
    void (*fn)(benchmark::State&);
  };
  const Entry entries[] = {
      {"relu", BM_Relu},
      {"add", BM_Add},
      {"mul", BM_Mul},
      {"add_row_broadcast", BM_AddRowBroadcast},
      {"mul_channel_broadcast", BM_MulChannelBroadcast},
      {"sum_rows", BM_SumRows},
      {"sum_all", BM_SumAll},
      {"sum_columns", BM_SumColumns},
      {"max_rows", BM_MaxRows},
      {"softmax", BM_Softmax},
      {"log_softmax_long_rows", BM_LogSoftmaxLongRows},
      {"softmax_backward", BM_SoftmaxBackward},
      {"copy_contiguous", BM_CopyContiguous},
      {"copy_transpose", BM_CopyTranspose},
      {"cast_f32_to_bf16", BM_CastF32ToBF16},
  };
  for (const Entry& e : entries)
    benchmark::RegisterBenchmark(e.name, e.fn)->Arg(kMid)->Arg(kLarge)->UseManualTime()->Unit(benchmark::kMicrosecond);
  const Entry layers[] = {
      {"batch_norm_forward_train_nchw", BM_BatchNormForwardNchw},
      {"batch_norm_forward_train_nhwc", BM_BatchNormForwardNhwc},
      {"batch_norm_backward_nchw", BM_BatchNormBackwardNchw},
      {"batch_norm_backward_nhwc", BM_BatchNormBackwardNhwc},
      {"max_pool_stem_forward_nchw", BM_MaxPoolForwardNchw},
      {"max_pool_stem_forward_nhwc", BM_MaxPoolForwardNhwc},
      {"max_pool_stem_backward_nchw", BM_MaxPoolBackwardNchw},
      {"max_pool_stem_backward_nhwc", BM_MaxPoolBackwardNhwc},
      {"avg_pool_stem_forward_nchw", BM_AvgPoolForwardNchw},
      {"avg_pool_stem_forward_nhwc", BM_AvgPoolForwardNhwc},
      {"avg_pool_stem_backward_nchw", BM_AvgPoolBackwardNchw},
      {"avg_pool_stem_backward_nhwc", BM_AvgPoolBackwardNhwc},
      {"copy_nchw_to_nhwc", BM_CopyNchwToNhwc},
      {"copy_nhwc_to_nchw", BM_CopyNhwcToNchw},
  };
  for (const Entry& e : layers)
    benchmark::RegisterBenchmark(e.name, e.fn)
        ->ArgName("batch")
        ->Arg(kSmallBatch)
        ->Arg(kLargeBatch)
        ->UseManualTime()
        ->Unit(benchmark::kMicrosecond);
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  // No flags of its own: everything is Google Benchmark's, handed on after --help.
  tandem::flags::Parser(
      "kernels_bench", "kernels_bench [Google Benchmark flags, e.g. --benchmark_filter=REGEX]",
      "Times the CUDA backend's elementwise, reduction, softmax and copy kernels, and batch norm, ResNet's\n"
      "stem pooling and NCHW <-> NHWC copies of [batch, 64, 56, 56] (batch 4 and 256), on GPU 0 with CUDA\n"
      "events, and reports bytes/s and the percentage of the device's copy bandwidth (measured at start-up\n"
      "with a 1 GiB device-to-device copy), from each op's minimal traffic. Goals on an H100/H200: >= 85% for\n"
      "elementwise ops, >= 80% for reductions, softmax and transposing copies. Without a GPU it says so and\n"
      "exits 1. Google Benchmark's own flags follow.")
      .parse_known(argc, argv, [&] {
        char* help[] = {argv[0], const_cast<char*>("--help")};
        int n = 2;
        benchmark::Initialize(&n, help);  // prints its flags and exits
      });
  // Without a GPU, or when a kernel fails: "kernels_bench: what went wrong", exit 1 (an exception escaping a
  // benchmark function would otherwise pass through Google Benchmark and abort).
  return tandem::flags::run_reporting_errors("kernels_bench", [&] {
    tandem::check_device_available(tandem::Device::cuda(0));
    benchmark::Initialize(&argc, argv);
    if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
    cudaDeviceProp prop{};
    TD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    tandem::g_copy_bytes_per_s = tandem::measure_copy_bandwidth();
    std::printf("device: %s; copy bandwidth (1 GiB device-to-device cudaMemcpyAsync, read + write): %.1f GB/s\n",
                prop.name, tandem::g_copy_bytes_per_s * 1e-9);
    tandem::register_benchmarks();
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  });
}
