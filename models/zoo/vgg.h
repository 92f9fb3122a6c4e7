// VGG-16 with batch norm, torchvision's vgg16_bn structure and key names (features.0.weight, ...,
// classifier.6.weight), a width option and a CIFAR head.
#pragma once

#include <memory>

#include "models/zoo/common.h"
#include "models/zoo/network.h"

namespace tandem {
namespace models {

// Items: features.0 .. features.43, avgpool, classifier. ImageNet head: 7x7 average pool (inputs whose
// feature map is a multiple of 7, e.g. 224x224), Linear(512*49, 4096), ReLU, Dropout, Linear(4096, 4096),
// ReLU, Dropout, Linear(4096, classes); the CIFAR head pools globally and is 512 wide. Widths scale with
// options.width / 64. Default blocks: the five conv stages, each ending with its max-pool; the last one
// takes the head.
std::shared_ptr<Network> make_vgg16_bn(const ModelOptions& options);

}  // namespace models
}  // namespace tandem
