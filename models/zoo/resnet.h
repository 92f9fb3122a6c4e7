// ResNet-18/34/50 with torchvision's structure and key names (conv1, bn1, layer1.0.conv1, ..., fc), an
// ImageNet or CIFAR stem, a width option and any number of input channels and classes.
#pragma once

#include <memory>

#include "models/zoo/common.h"
#include "models/zoo/network.h"

namespace tandem {
namespace models {

// conv3x3-BN-ReLU-conv3x3-BN, plus the shortcut, then ReLU.
class BasicBlock : public Module {
 public:
  static constexpr int64_t kExpansion = 1;
  BasicBlock(int64_t in, int64_t planes, int64_t stride, bool separable, Generator& gen);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  double flops(const Shape& input) const override { return chain_flops(input, downsample_.get()); }

 private:
  ModulePtr conv1_, conv2_, downsample_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_;
};

// conv1x1-BN-ReLU-conv3x3(stride)-BN-ReLU-conv1x1-BN, plus the shortcut, then ReLU (torchvision's v1.5).
class Bottleneck : public Module {
 public:
  static constexpr int64_t kExpansion = 4;
  Bottleneck(int64_t in, int64_t planes, int64_t stride, bool separable, Generator& gen);
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  double flops(const Shape& input) const override { return chain_flops(input, downsample_.get()); }

 private:
  ModulePtr conv1_, conv2_, conv3_, downsample_;
  std::shared_ptr<BatchNorm2d> bn1_, bn2_, bn3_;
};

// depth 18, 34 or 50. Items: conv1, bn1, relu, maxpool (ImageNet stem only), layer1..layer4, avgpool, fc.
// Default blocks: stem + layer1 | layer2 | layer3 | layer4 + avgpool + fc.
std::shared_ptr<Network> make_resnet(int depth, const ModelOptions& options);

}  // namespace models
}  // namespace tandem
