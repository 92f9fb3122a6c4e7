// Building pieces shared by the zoo: convolutions (plain or depthwise-separable), conv-BN-activation groups,
// and torchvision's initialization passes.
#pragma once

#include "models/layers.h"
#include "models/sequential.h"

namespace tandem {
namespace models {

enum class Activation { None, ReLU, ReLU6 };
ModulePtr make_activation(Activation a);  // nullptr for None

// A Conv2d, or when `separable` and the conv is k x k (k > 1) with groups 1, the depthwise-separable
// Sequential {0: depthwise k x k (same stride, padding, dilation), 1: BatchNorm2d, 2: ReLU, 3: pointwise 1 x 1}.
ModulePtr make_conv(const Conv2dSpec& spec, bool separable, Generator& gen);

// torchvision's Conv2dNormActivation: Sequential {0: conv, 1: BatchNorm2d, 2: activation (if any)}.
std::shared_ptr<Sequential> conv_bn_act(const Conv2dSpec& spec, Activation act, bool separable, Generator& gen,
                                        const BatchNormSpec& bn = {});

// Spec of a k x k convolution with "same" padding (k / 2), no bias.
Conv2dSpec conv_spec(int64_t in, int64_t out, int64_t kernel, int64_t stride = 1, int64_t groups = 1);

// How a model initializes its Linear layers after construction.
enum class LinearInit {
  Default,    // keep PyTorch's default (ResNet)
  Normal001,  // normal(0, 0.01), zero bias (MobileNetV2, VGG)
};
// torchvision's pass over all modules: Conv2d weights kaiming-normal (fan_out, ReLU) with zero bias,
// BatchNorm2d weight 1 and bias 0, Linear as `linear` says.
void init_like_torchvision(Module& model, LinearInit linear, Generator& gen);

}  // namespace models
}  // namespace tandem
