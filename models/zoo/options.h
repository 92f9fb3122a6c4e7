// ModelOptions: what the model factories of the zoo take (classes, input channels, variant, width, seed).
#pragma once

#include <cstdint>
#include <string>

namespace tandem {
namespace models {

struct ModelOptions {
  int64_t num_classes = 1000;
  int64_t in_channels = 3;  // 1 for Fashion-MNIST
  // The CIFAR variant (32x32 inputs). ResNet: 3x3 stride-1 first conv and no max-pool. MobileNetV2:
  // Pipe-BD's CIFAR teacher (stride-1 stem and first 24-channel stage). VGG: a global-average-pool head
  // with 512-wide hidden layers instead of the 7x7 pool and 4096-wide layers.
  bool cifar = false;
  // ResNet and VGG: channels of the first stage (later stages keep torchvision's ratios); 0 means 64.
  int64_t width = 0;
  double width_mult = 1.0;  // MobileNetV2's width multiplier
  double dropout = -1;      // classifier dropout; negative: the model's own (MobileNetV2 0.2, VGG 0.5)
  // The depthwise-separable version: each k x k convolution (k > 1, groups 1) becomes a depthwise k x k
  // convolution, BatchNorm and ReLU followed by a pointwise 1 x 1 convolution, which the original's own
  // BatchNorm and activation follow. Used to build blockwise-distillation students.
  bool separable = false;
  // The MBConv supernet student of this model (blockwise distillation, models/blocks.h) with this many cells
  // per block, for `image_size` x `image_size` inputs (0: the variant's 32 or 224): one item "block<i>" per
  // block of the model's default partition. 0: the model itself.
  int64_t supernet_cells = 0;
  int64_t image_size = 0;
  uint64_t seed = 0;  // initialization (and dropout masks)
};

}  // namespace models
}  // namespace tandem
