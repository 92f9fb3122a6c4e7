// Layer implementations: parameter setup, forward through the op front end, and shape inference.
#include "models/layers.h"

#include <atomic>
#include <sstream>
#include <utility>

#include "models/init.h"
#include "models/sequential.h"
#include "runtime/base/error.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"

namespace tandem {
namespace models {

int64_t window_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                           bool ceil_mode) {
  int64_t span = in + 2 * padding - dilation * (kernel - 1) - 1;
  if (span < 0) return 0;
  int64_t out = (ceil_mode ? (span + stride - 1) / stride : span / stride) + 1;
  // A last window that would start inside the right padding is dropped (PyTorch's rule).
  if (ceil_mode && (out - 1) * stride >= in + padding) --out;
  return out;
}

void check_nchw(const Shape& input, int64_t channels, const std::string& who) {
  TD_CHECK_SHAPE(input.size() == 4, who, " expects a 4-D input [N, C, H, W], got ", shape_str(input));
  TD_CHECK_SHAPE(channels <= 0 || input[1] == channels, who, " expects ", channels, " input channels, got ",
                 shape_str(input));
}

namespace {
Shape pooled_shape(const Shape& input, const Pool2dOptions& o, const std::string& who) {
  check_nchw(input, 0, who);
  int64_t h = window_output_size(input[2], o.kernel_h, o.stride_h, o.pad_h, 1, o.ceil_mode);
  int64_t w = window_output_size(input[3], o.kernel_w, o.stride_w, o.pad_w, 1, o.ceil_mode);
  TD_CHECK_SHAPE(h > 0 && w > 0, who, ": input ", shape_str(input), " is smaller than the pooling window");
  return {input[0], input[1], h, w};
}

Pool2dOptions pool_options(int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode) {
  TD_CHECK(kernel > 0 && stride > 0 && padding >= 0, "pooling needs a positive kernel and stride, got kernel ", kernel,
           ", stride ", stride, ", padding ", padding);
  TD_CHECK(2 * padding <= kernel, "pooling padding ", padding, " must be at most half the kernel ", kernel);
  Pool2dOptions o;
  o.kernel_h = o.kernel_w = kernel;
  o.stride_h = o.stride_w = stride;
  o.pad_h = o.pad_w = padding;
  o.ceil_mode = ceil_mode;
  return o;
}
}  // namespace

// ---- Conv2d ----

Conv2d::Conv2d(const Conv2dSpec& spec, Generator& gen) : Module("Conv2d"), spec_(spec) {
  TD_CHECK(spec.in_channels > 0 && spec.out_channels > 0 && spec.kernel > 0 && spec.stride > 0 && spec.dilation > 0 &&
               spec.padding >= 0 && spec.groups > 0,
           "Conv2d: channels, kernel, stride, dilation and groups must be positive and padding non-negative (in ",
           spec.in_channels, ", out ", spec.out_channels, ", kernel ", spec.kernel, ", stride ", spec.stride,
           ", padding ", spec.padding, ", dilation ", spec.dilation, ", groups ", spec.groups, ")");
  TD_CHECK(spec.in_channels % spec.groups == 0 && spec.out_channels % spec.groups == 0, "Conv2d: groups ", spec.groups,
           " must divide in_channels ", spec.in_channels, " and out_channels ", spec.out_channels);
  weight = parameter_tensor({spec.out_channels, spec.in_channels / spec.groups, spec.kernel, spec.kernel});
  init::default_uniform(weight, init::fan_in(weight), gen);
  register_parameter("weight", &weight);
  if (spec.bias) {
    bias = parameter_tensor({spec.out_channels});
    init::default_uniform(bias, init::fan_in(weight), gen);
    register_parameter("bias", &bias);
  }
}

Tensor Conv2d::forward(const Tensor& x) {
  Conv2dOptions o;
  o.stride_h = o.stride_w = spec_.stride;
  o.pad_h = o.pad_w = spec_.padding;
  o.dilation_h = o.dilation_w = spec_.dilation;
  o.groups = spec_.groups;
  return conv2d(x, weight, bias, o);
}

Shape Conv2d::output_shape(const Shape& input) const {
  check_nchw(input, spec_.in_channels, describe());
  int64_t h = window_output_size(input[2], spec_.kernel, spec_.stride, spec_.padding, spec_.dilation);
  int64_t w = window_output_size(input[3], spec_.kernel, spec_.stride, spec_.padding, spec_.dilation);
  TD_CHECK_SHAPE(h > 0 && w > 0, describe(), ": input ", shape_str(input), " is smaller than the kernel");
  return {input[0], spec_.out_channels, h, w};
}

std::string Conv2d::describe() const {
  std::ostringstream os;
  os << "Conv2d(" << spec_.in_channels << ", " << spec_.out_channels << ", kernel " << spec_.kernel;
  if (spec_.stride != 1) os << ", stride " << spec_.stride;
  if (spec_.padding != 0) os << ", padding " << spec_.padding;
  if (spec_.dilation != 1) os << ", dilation " << spec_.dilation;
  if (spec_.groups != 1) os << ", groups " << spec_.groups;
  if (!spec_.bias) os << ", no bias";
  os << ")";
  return os.str();
}

// ---- BatchNorm2d ----

namespace {
std::atomic<bool> g_batch_norm_fusion{true};
}  // namespace

bool batch_norm_fusion() { return g_batch_norm_fusion.load(std::memory_order_relaxed); }
void set_batch_norm_fusion(bool on) { g_batch_norm_fusion.store(on, std::memory_order_relaxed); }

BatchNorm2d::BatchNorm2d(int64_t channels, const BatchNormSpec& spec)
    : Module("BatchNorm2d"), channels_(channels), spec_(spec) {
  TD_CHECK(channels > 0, "BatchNorm2d needs a positive channel count, got ", channels);
  TD_CHECK(spec.eps > 0 && spec.momentum >= 0 && spec.momentum <= 1, "BatchNorm2d: eps must be positive and ",
           "momentum in [0, 1], got eps ", spec.eps, ", momentum ", spec.momentum);
  if (spec.affine) {
    weight = parameter_tensor({channels});
    bias = parameter_tensor({channels});
    init::constant(weight, 1.0);
    init::constant(bias, 0.0);
    register_parameter("weight", &weight);
    register_parameter("bias", &bias);
  }
  running_mean = parameter_tensor({channels});
  running_var = parameter_tensor({channels});
  num_batches_tracked_ = parameter_tensor({}, DType::I64);
  running_mean.fill_(0.0);
  running_var.fill_(1.0);
  num_batches_tracked_.fill_(0.0);
  register_buffer("running_mean", &running_mean);
  register_buffer("running_var", &running_var);
  register_buffer("num_batches_tracked", &num_batches_tracked_);
}

bool BatchNorm2d::count_batch() {
  const bool batch_stats = is_training() && !frozen_;
  GraphCapture* capture = active_capture();
  if (batch_stats && capture != nullptr && capture->stream().device() == running_mean.device()) {
    // A capture runs nothing: each replay counts, as an eager step would.
    capture->on_replay([count = &batches_] { ++*count; });
  } else if (batch_stats) {
    ++batches_;
  }
  return batch_stats;
}

Tensor BatchNorm2d::forward(const Tensor& x) {
  const bool batch_stats = count_batch();
  return batch_norm(x, weight, bias, running_mean, running_var, batch_stats, spec_.momentum, spec_.eps);
}

Tensor BatchNorm2d::forward_act(const Tensor& x, const Tensor& residual, BnActivation act) {
  if (!batch_norm_fusion()) {
    Tensor y = forward(x);
    if (residual.defined()) y = add(y, residual);
    if (act == BnActivation::Relu) return relu(y);
    return act == BnActivation::Relu6 ? relu6(y) : y;
  }
  const bool batch_stats = count_batch();
  return batch_norm_act(x, weight, bias, running_mean, running_var, residual, act, batch_stats, spec_.momentum,
                        spec_.eps);
}

Shape BatchNorm2d::output_shape(const Shape& input) const {
  TD_CHECK_SHAPE((input.size() == 4 || input.size() == 2) && input[1] == channels_, describe(), " expects [N, ",
                 channels_, ", H, W] or [N, ", channels_, "], got ", shape_str(input));
  return input;
}

std::string BatchNorm2d::describe() const {
  std::ostringstream os;
  os << "BatchNorm2d(" << channels_ << (frozen_ ? ", frozen" : "") << ")";
  return os.str();
}

void BatchNorm2d::set_frozen(bool frozen) {
  frozen_ = frozen;
  if (spec_.affine) {
    weight.set_requires_grad(!frozen);
    bias.set_requires_grad(!frozen);
    if (frozen) {
      weight.zero_grad();
      bias.zero_grad();
    }
  }
}

const Tensor& BatchNorm2d::num_batches_tracked() const {
  write_host_state();
  return num_batches_tracked_;
}

void BatchNorm2d::write_host_state() const {
  if (batches_written_ == batches_) return;
  Tensor(num_batches_tracked_).fill_(static_cast<double>(batches_));
  batches_written_ = batches_;
}

void BatchNorm2d::on_state_loaded() { batches_written_ = batches_ = num_batches_tracked_.item<int64_t>(); }

// ---- Linear ----

Linear::Linear(int64_t in_features, int64_t out_features, bool with_bias, Generator& gen)
    : Module("Linear"), in_(in_features), out_(out_features) {
  TD_CHECK(in_features > 0 && out_features > 0, "Linear needs positive sizes, got ", in_features, " -> ", out_features);
  weight = parameter_tensor({out_features, in_features});
  init::default_uniform(weight, in_features, gen);
  register_parameter("weight", &weight);
  if (with_bias) {
    bias = parameter_tensor({out_features});
    init::default_uniform(bias, in_features, gen);
    register_parameter("bias", &bias);
  }
}

Tensor Linear::forward(const Tensor& x) { return linear(x, weight, bias); }

Shape Linear::output_shape(const Shape& input) const {
  TD_CHECK_SHAPE(!input.empty() && input.back() == in_, describe(), " expects an input ending in ", in_,
                 " features, got ", shape_str(input));
  Shape out = input;
  out.back() = out_;
  return out;
}

std::string Linear::describe() const {
  std::ostringstream os;
  os << "Linear(" << in_ << ", " << out_ << (bias.defined() ? "" : ", no bias") << ")";
  return os.str();
}

// ---- activations, pooling, dropout, flatten ----

Tensor ReLU::forward(const Tensor& x) { return relu(x); }
Tensor ReLU6::forward(const Tensor& x) { return relu6(x); }

Pool2d::Pool2d(std::string type_name, int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode)
    : Module(std::move(type_name)), o_(pool_options(kernel, stride, padding, ceil_mode)) {}
Shape Pool2d::output_shape(const Shape& input) const { return pooled_shape(input, o_, describe()); }
std::string Pool2d::describe() const {
  std::ostringstream os;
  os << type_name() << "(kernel " << o_.kernel_h << ", stride " << o_.stride_h << ", padding " << o_.pad_h << ")";
  return os.str();
}

MaxPool2d::MaxPool2d(int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode)
    : Pool2d("MaxPool2d", kernel, stride, padding, ceil_mode) {}
Tensor MaxPool2d::forward(const Tensor& x) { return max_pool2d(x, o_); }

AvgPool2d::AvgPool2d(int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode, bool count_include_pad)
    : Pool2d("AvgPool2d", kernel, stride, padding, ceil_mode) {
  o_.count_include_pad = count_include_pad;
}
Tensor AvgPool2d::forward(const Tensor& x) { return avg_pool2d(x, o_); }

Tensor GlobalAvgPool::forward(const Tensor& x) { return global_avg_pool2d(x); }
Shape GlobalAvgPool::output_shape(const Shape& input) const {
  check_nchw(input, 0, describe());
  return {input[0], input[1]};
}

AdaptiveAvgPoolFlatten::AdaptiveAvgPoolFlatten(int64_t size) : Module("AdaptiveAvgPoolFlatten"), size_(size) {
  TD_CHECK(size > 0, "AdaptiveAvgPoolFlatten needs a positive size, got ", size);
}
Tensor AdaptiveAvgPoolFlatten::forward(const Tensor& x) {
  output_shape(x.shape());  // checks divisibility
  int64_t kh = x.size(2) / size_, kw = x.size(3) / size_;
  if (kh == 1 && kw == 1) return x.flatten(1);
  Pool2dOptions o;
  o.kernel_h = o.stride_h = kh;
  o.kernel_w = o.stride_w = kw;
  return avg_pool2d(x, o).flatten(1);
}
Shape AdaptiveAvgPoolFlatten::output_shape(const Shape& input) const {
  check_nchw(input, 0, describe());
  TD_CHECK_SHAPE(input[2] % size_ == 0 && input[3] % size_ == 0, describe(), ": input ", shape_str(input),
                 " must have H and W divisible by ", size_, " (use an input size with that property, e.g. 224)");
  return {input[0], input[1] * size_ * size_};
}
std::string AdaptiveAvgPoolFlatten::describe() const { return "AdaptiveAvgPoolFlatten(" + std::to_string(size_) + ")"; }

Dropout::Dropout(double p, uint64_t seed) : Module("Dropout"), p_(p), gen_(seed) {
  TD_CHECK(p >= 0 && p < 1, "Dropout probability must be in [0, 1), got ", p);
  register_generator("generator", &gen_);
}
Tensor Dropout::forward(const Tensor& x) {
  if (p_ == 0 || !is_training()) return x;
  return dropout(x, p_, true, gen_);
}
std::string Dropout::describe() const {
  std::ostringstream os;
  os << "Dropout(p=" << p_ << ")";
  return os.str();
}

Tensor Flatten::forward(const Tensor& x) { return x.flatten(1); }
Shape Flatten::output_shape(const Shape& input) const {
  TD_CHECK_SHAPE(input.size() >= 2, "Flatten expects at least 2 dims, got ", shape_str(input));
  int64_t n = 1;
  for (size_t i = 1; i < input.size(); ++i) n *= input[i];
  return {input[0], n};
}

// ---- FLOPs ----

double Conv2d::flops(const Shape& input) const {
  const double per_output =
      static_cast<double>(spec_.in_channels / spec_.groups) * spec_.kernel * spec_.kernel + (spec_.bias ? 1 : 0);
  return static_cast<double>(shape_numel(output_shape(input))) * per_output;
}

double Linear::flops(const Shape& input) const {
  const double rows = static_cast<double>(shape_numel(input)) / static_cast<double>(in_);
  return rows * static_cast<double>(out_) * (in_ + (bias.defined() ? 1 : 0));
}

// ---- Residual ----

Residual::Residual(ModulePtr body, ModulePtr shortcut, bool relu_after)
    : Module("Residual"), body_(std::move(body)), shortcut_(std::move(shortcut)), relu_after_(relu_after) {
  add_child("body", body_);
  if (shortcut_) add_child("shortcut", shortcut_);
}

Tensor Residual::forward(const Tensor& x) {
  // The shortcut first: a body ending in a batch norm takes the add and ReLU fused into it where models fuse.
  const Tensor s = shortcut_ ? shortcut_->forward(x) : x;
  auto* seq = dynamic_cast<Sequential*>(body_.get());
  Tensor y = seq ? seq->forward_bn_act(x, s, relu_after_ ? BnActivation::Relu : BnActivation::None) : Tensor();
  if (y.defined()) return y;
  y = add(body_->forward(x), s);
  return relu_after_ ? relu(y) : y;
}

Shape Residual::output_shape(const Shape& input) const {
  Shape a = body_->output_shape(input);
  Shape b = shortcut_ ? shortcut_->output_shape(input) : input;
  TD_CHECK_SHAPE(a == b, "Residual: the body gives ", shape_str(a), " but the shortcut gives ", shape_str(b),
                 " for input ", shape_str(input));
  return a;
}

}  // namespace models
}  // namespace tandem
