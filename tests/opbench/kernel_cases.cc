// kernels_bench's cases as op cases at their own shapes: which case, which pass, and its shapes at the argument.
#include "tests/opbench/kernel_cases.h"

#include <deque>
#include <string>
#include <utility>

#include "runtime/base/error.h"
#include "runtime/memory/stream.h"
#include "tests/harness/op_bench.h"
#include "tests/opbench/case_families.h"

namespace tandem {
namespace testing {

namespace {

using Shapes = std::function<std::vector<Shape>(int64_t arg)>;

constexpr int64_t kRow = 1024;  // row length of the 2-D cases
constexpr int64_t kChannels = 64, kSide = 56;

const OpCase& op_case(const std::string& family, const std::string& name) {
  static std::deque<std::pair<std::string, OpCase>> cases;  // the ones asked for so far (references stay valid)
  for (const auto& [f, c] : cases)
    if (f == family && c.name == name) return c;
  for (const CaseFamily& f : case_families())
    if (f.name == family)
      for (OpCase& c : f.cases())
        if (c.name == name) {
          cases.emplace_back(family, std::move(c));
          return cases.back().second;
        }
  TD_THROW(ValueError, "no op case ", family, "/", name, " (tests/opbench/case_families.cc)");
}

// One pass of op case family/name at shapes(arg) on GPU 0, launched on the stream given.
std::function<costmodel::KernelRun(int64_t)> pass_of(std::string family, std::string name, Pass pass, Shapes shapes) {
  return [=](int64_t arg) {
    static Generator gen(20240611);
    const Device gpu = Device::cuda(0);
    ShapedCall c = shaped_call(op_case(family, name), shapes(arg), pass, gpu, DType::F32, gen);
    const std::function<void()> call = c.call;
    return costmodel::KernelRun{std::move(c.operands),
                                [call](const Stream& s) {
                                  StreamGuard on(s);
                                  call();
                                },
                                c.bytes};
  };
}

costmodel::KernelCase elements(std::string name, std::string family, std::string op, Shapes shapes,
                               Pass pass = Pass::Forward) {
  return costmodel::KernelCase{name, pass_of(std::move(family), std::move(op), pass, std::move(shapes))};
}

// A layer case: its argument is the batch (4 and 256: 0.8M and 51M elements), recorded at batch 1.
costmodel::KernelCase layer(std::string name, std::string family, std::string op, Pass pass, Shapes shapes) {
  costmodel::KernelCase c{name, pass_of(std::move(family), std::move(op), pass, std::move(shapes))};
  c.arg_name = "batch";
  c.args = {4, 256};
  c.record_arg = 1;
  return c;
}

Shapes flat(int count) {
  return [count](int64_t n) { return std::vector<Shape>(static_cast<size_t>(count), Shape{n}); };
}
Shapes rows(int64_t row) {
  return [row](int64_t n) { return std::vector<Shape>{{n / row, row}}; };
}
// [batch, 64, 56, 56], `count` times (batch norm's x, then its residual when fused), or [batch, 64, 112, 112]
// (the stem pool's input); batch norm's weight and bias follow.
Shapes activations(int count, bool with_params, int64_t side = kSide) {
  return [=](int64_t batch) {
    std::vector<Shape> s{{batch, kChannels, side, side}};
    if (with_params) s.insert(s.end(), {{kChannels}, {kChannels}});
    if (count > 1) s.push_back({batch, kChannels, side, side});
    return s;
  };
}

std::vector<costmodel::KernelCase> make_cases() {
  std::vector<costmodel::KernelCase> cs = {
      elements("relu", "elementwise", "relu", flat(1)),
      elements("add", "elementwise", "add_same", flat(2)),
      elements("mul", "elementwise", "mul_same", flat(2)),
      // a [n / 1024, 1024] + bias [1024] (broadcast over rows)
      elements("add_row_broadcast", "elementwise", "add_bcast_inner",
               [](int64_t n) {
                 return std::vector<Shape>{{n / kRow, kRow}, {kRow}};
               }),
      // x [n / (64 * 1024), 64, 32, 32] * scale [1, 64, 1, 1] (per channel, as in batch norm)
      elements("mul_channel_broadcast", "elementwise", "mul_bcast_inner",
               [](int64_t n) {
                 return std::vector<Shape>{{n / (64 * 1024), 64, 32, 32}, {1, 64, 1, 1}};
               }),
      elements("sum_rows", "reduction", "sum_dims_neg1", rows(kRow)),
      elements("sum_all", "reduction", "sum_all", flat(1)),
      elements("sum_columns", "reduction", "sum_dims_0", rows(kRow)),
      elements("max_rows", "reduction", "max_dim_neg1", rows(kRow)),  // values and i64 indices
      elements("softmax", "reduction", "softmax_dim_neg1", rows(kRow)),
      elements("log_softmax_long_rows", "reduction", "log_softmax_dim_neg1", rows(16384)),
      elements("softmax_backward", "reduction", "softmax_dim_neg1", rows(kRow), Pass::Backward),
      elements("copy_contiguous", "view_copy", "clone", flat(1)),
      // y = x.t().contiguous() for a square x of side the least power of two with side^2 >= n
      elements("copy_transpose", "view_copy", "contiguous_of_t_2d",
               [](int64_t n) {
                 int64_t side = 1;
                 while (side * side < n) side *= 2;
                 return std::vector<Shape>{{side, side}};
               }),
      elements("cast_f32_to_bf16", "view_copy", "to_bf16", flat(1)),
  };
  // Batch norm in training (batch statistics, affine), NCHW or NHWC; fused: relu(batch_norm(x) + residual), the
  // last batch norm of a ResNet block. The stem's pooling: 3 x 3 windows, stride 2, padding 1, from 112 x 112.
  const auto formats = {false, true};  // NCHW, NHWC
  const auto passes = {Pass::Forward, Pass::Backward};
  auto format = [](bool nhwc) { return std::string(nhwc ? "_nhwc" : "_nchw"); };
  auto channels_last = [](bool nhwc) { return std::string(nhwc ? "_channels_last" : ""); };
  for (const bool fused : {false, true})
    for (const Pass pass : passes)
      for (const bool nhwc : formats)
        cs.push_back(layer(std::string(fused ? "batch_norm_add_relu_" : "batch_norm_") +
                               (pass == Pass::Forward ? "forward_train" : "backward") + format(nhwc),
                           "batch_norm",
                           fused ? "batch_norm_add_relu_4d" + channels_last(nhwc)
                                 : "batch_norm_train_4d" + channels_last(nhwc) + "_affine",
                           pass, activations(fused ? 2 : 1, true)));
  for (const std::string pool : {"max", "avg"})
    for (const Pass pass : passes)
      for (const bool nhwc : formats)
        cs.push_back(layer(pool + "_pool_stem_" + (pass == Pass::Forward ? "forward" : "backward") + format(nhwc),
                           "pool", pool + "_pool2d_3x3_pad" + channels_last(nhwc), pass,
                           activations(1, false, 2 * kSide)));
  // MobileNetV2's depthwise 3 x 3 convolution (stride 1, padding 1), channels-last: forward, and backward (the data
  // and weight gradients).
  for (const Pass pass : passes)
    cs.push_back(layer(std::string("depthwise_3x3_") + (pass == Pass::Forward ? "forward" : "backward") + "_nhwc",
                       "conv", "conv2d_depthwise_3x3_c64_channels_last", pass, [](int64_t batch) {
                         return std::vector<Shape>{{batch, kChannels, kSide, kSide}, {kChannels, 1, 3, 3}};
                       }));
  cs.push_back(layer("copy_nchw_to_nhwc", "dropout_format", "to_channels_last", Pass::Forward, activations(1, false)));
  cs.push_back(
      layer("copy_nhwc_to_nchw", "dropout_format", "to_nchw_of_channels_last", Pass::Forward, activations(1, false)));
  return cs;
}

}  // namespace

const std::vector<costmodel::KernelCase>& kernel_cases() {
  static const std::vector<costmodel::KernelCase> cases = make_cases();
  return cases;
}

}  // namespace testing
}  // namespace tandem
