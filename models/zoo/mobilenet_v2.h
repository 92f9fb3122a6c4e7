// MobileNetV2 with torchvision's structure and key names (features.0.0.weight, ..., classifier.1.weight),
// a width multiplier, and the CIFAR variant Pipe-BD uses as its teacher.
#pragma once

#include <memory>

#include "models/zoo/common.h"
#include "models/zoo/network.h"

namespace tandem {
namespace models {

// torchvision's _make_divisible: v rounded to the nearest multiple of `divisor`, at least `divisor`, and
// not more than 10% below v.
int64_t make_divisible(double v, int64_t divisor = 8);

// The inverted residual block (MBConv): [1x1 expand, BN, ReLU6] (when expand > 1), k x k depthwise (stride),
// BN, ReLU6, 1x1 project, BN; plus the input when stride is 1, in == out and `allow_residual`. Children
// follow torchvision: conv.0, conv.1, ... (torchvision's InvertedResidual is the kernel-3 case).
class InvertedResidual : public Module {
 public:
  InvertedResidual(int64_t in, int64_t out, int64_t stride, int64_t expand, int64_t kernel, bool allow_residual,
                   Generator& gen, const BatchNormSpec& bn = {});
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;
  bool has_residual() const { return residual_; }

 private:
  std::shared_ptr<Sequential> conv_;
  int64_t in_, out_, stride_, expand_, kernel_;
  bool residual_;
};

// Items: features.0 .. features.18, avgpool, classifier (Dropout, Linear). Default blocks (Pipe-BD's six):
// stem + 16 + 24-channel stage (features.0-3) | 32 (4-6) | 64 (7-10) | 96 (11-13) | 160 (14-16) |
// 320 + 1x1 conv + pool + classifier (17-18, avgpool, classifier).
std::shared_ptr<Network> make_mobilenet_v2(const ModelOptions& options);

}  // namespace models
}  // namespace tandem
