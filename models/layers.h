// The layers models are built from: Conv2d, BatchNorm2d, Linear, activations, pooling, Dropout, Identity,
// Flatten and a residual add. Parameters start with PyTorch's default initialization from a Generator.
#pragma once

#include <memory>
#include <string>

#include "models/module.h"
#include "runtime/nn/nn_ops.h"

namespace tandem {
namespace models {

// FLOPs of layers that do one operation per input element (batch norm, pooling).
inline double per_element_flops(const Shape& input) { return static_cast<double>(shape_numel(input)); }

struct Conv2dSpec {
  int64_t in_channels = 0;
  int64_t out_channels = 0;
  int64_t kernel = 1;  // square kernels
  int64_t stride = 1;
  int64_t padding = 0;
  int64_t dilation = 1;
  int64_t groups = 1;  // groups == in_channels == out_channels: depthwise
  bool bias = false;
};

class Conv2d : public Module {
 public:
  Conv2d(const Conv2dSpec& spec, Generator& gen);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  double flops(const Shape& input) const override;
  std::string describe() const override;
  const Conv2dSpec& spec() const { return spec_; }
  bool is_depthwise() const { return spec_.groups > 1 && spec_.groups == spec_.in_channels; }

  Tensor weight;  // [out, in / groups, k, k]
  Tensor bias;    // [out] or undefined

 private:
  Conv2dSpec spec_;
};

// Whether models fuse a batch norm with the residual add and ReLU/ReLU6 after it (batch_norm_act: one pass
// instead of three each way); on unless set off, e.g. to compare with the unfused ops.
bool batch_norm_fusion();
void set_batch_norm_fusion(bool on);

struct BatchNormSpec {
  double eps = 1e-5;
  double momentum = 0.1;  // running = (1 - momentum) * running + momentum * batch statistic
  bool affine = true;
};

// Batch norm over [N, C, H, W] (or [N, C]). A frozen BatchNorm2d always normalizes with its running
// statistics and its weight and bias get no gradient, whatever train()/eval() say.
class BatchNorm2d : public Module {
 public:
  BatchNorm2d(int64_t channels, const BatchNormSpec& spec = {});
  Tensor forward(const Tensor& x) override;
  // act(forward(x) + residual) (residual may be undefined): fused when batch_norm_fusion() is on.
  Tensor forward_act(const Tensor& x, const Tensor& residual, BnActivation act);
  Shape output_shape(const Shape& input) const override;
  double flops(const Shape& input) const override { return per_element_flops(input); }
  std::string describe() const override;
  void set_frozen(bool frozen);
  bool frozen() const { return frozen_; }
  int64_t channels() const { return channels_; }
  const BatchNormSpec& spec() const { return spec_; }

  // The i64 scalar buffer (torchvision's key) holding the batches trained on, written from the host count now.
  const Tensor& num_batches_tracked() const;

  Tensor weight, bias;               // [C] (undefined without affine)
  Tensor running_mean, running_var;  // [C]

 protected:
  void on_state_loaded() override;
  void write_host_state() const override;

 private:
  int64_t channels_;
  BatchNormSpec spec_;
  bool frozen_ = false;
  // Counts a batch when training with batch statistics (at each replay when a CUDA graph is being captured);
  // returns whether it trains so.
  bool count_batch();
  // The count lives on the host; the buffer gets it only when read (a fill per step would be a kernel launch per
  // batch norm on a GPU).
  Tensor num_batches_tracked_;
  int64_t batches_ = 0;
  mutable int64_t batches_written_ = 0;  // the count the buffer holds
};

class Linear : public Module {
 public:
  Linear(int64_t in_features, int64_t out_features, bool bias, Generator& gen);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  double flops(const Shape& input) const override;
  std::string describe() const override;
  int64_t in_features() const { return in_; }
  int64_t out_features() const { return out_; }

  Tensor weight;  // [out, in]
  Tensor bias;    // [out] or undefined

 private:
  int64_t in_, out_;
};

class ReLU : public Module {
 public:
  ReLU() : Module("ReLU") {}
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override { return input; }
};

class ReLU6 : public Module {
 public:
  ReLU6() : Module("ReLU6") {}
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override { return input; }
};

// What max and average pooling share: square window options, the output shape, the cost and the description.
class Pool2d : public Module {
 public:
  Shape output_shape(const Shape& input) const override;
  double flops(const Shape& input) const override { return per_element_flops(input); }
  std::string describe() const override;

 protected:
  Pool2d(std::string type_name, int64_t kernel, int64_t stride, int64_t padding, bool ceil_mode);
  Pool2dOptions o_;
};

class MaxPool2d : public Pool2d {
 public:
  MaxPool2d(int64_t kernel, int64_t stride, int64_t padding = 0, bool ceil_mode = false);
  Tensor forward(const Tensor& x) override;
};

class AvgPool2d : public Pool2d {
 public:
  AvgPool2d(int64_t kernel, int64_t stride, int64_t padding = 0, bool ceil_mode = false, bool count_include_pad = true);
  Tensor forward(const Tensor& x) override;
};

// Mean over H and W: [N, C, H, W] -> [N, C] (PyTorch's AdaptiveAvgPool2d(1) followed by flatten(1)).
class GlobalAvgPool : public Module {
 public:
  GlobalAvgPool() : Module("GlobalAvgPool") {}
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  double flops(const Shape& input) const override { return per_element_flops(input); }
};

// Adaptive average pooling to size x size where the input's H and W are multiples of `size` (so the
// windows are exact and equal, as torchvision's VGG head on 224x224 inputs), then flatten(1).
class AdaptiveAvgPoolFlatten : public Module {
 public:
  explicit AdaptiveAvgPoolFlatten(int64_t size);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  double flops(const Shape& input) const override { return per_element_flops(input); }
  std::string describe() const override;

 private:
  int64_t size_;
};

// Zeroes elements with probability p in training (scaling the rest by 1/(1-p)); its own seeded generator
// makes the masks reproducible and its state is part of rng_state().
class Dropout : public Module {
 public:
  Dropout(double p, uint64_t seed);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override { return input; }
  std::string describe() const override;
  double p() const { return p_; }

 private:
  double p_;
  Generator gen_;
};

class Identity : public Module {
 public:
  Identity() : Module("Identity") {}
  Tensor forward(const Tensor& x) override { return x; }
  Shape output_shape(const Shape& input) const override { return input; }
};

// x.flatten(1): [N, ...] -> [N, prod(...)].
class Flatten : public Module {
 public:
  Flatten() : Module("Flatten") {}
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
};

// body(x) + shortcut(x) (the identity when no shortcut is given), optionally followed by a ReLU.
class Residual : public Module {
 public:
  Residual(ModulePtr body, ModulePtr shortcut = nullptr, bool relu_after = false);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  double flops(const Shape& input) const override { return chain_flops(input, shortcut_.get()); }

 private:
  ModulePtr body_, shortcut_;
  bool relu_after_;
};

// Output size of a convolution or pooling window along one dim (PyTorch's formula, ceil_mode included).
int64_t window_output_size(int64_t in, int64_t kernel, int64_t stride, int64_t padding, int64_t dilation,
                           bool ceil_mode = false);
// Throws ShapeError unless `input` is [N, C, H, W] (C == channels when channels > 0).
void check_nchw(const Shape& input, int64_t channels, const std::string& who);

}  // namespace models
}  // namespace tandem
