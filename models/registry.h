// The model registry: builds zoo models by name ("resnet18", "mobilenet_v2", ...) with options, and parses
// model specs such as "resnet18:cifar,width=8".
#pragma once

#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "models/zoo/network.h"
#include "models/zoo/options.h"

namespace tandem {
namespace models {

// Known names: resnet18, resnet34, resnet50, mobilenet_v2, vgg16_bn. An unknown name throws ValueError
// listing them.
std::shared_ptr<Network> make_model(const std::string& name, const ModelOptions& options = {});
std::vector<std::string> model_names();

// "NAME[:KEY[=VALUE],...]" with keys cifar, separable (flags, or =0/1), width, width_mult, classes,
// in_channels, dropout, supernet (cells per block of the model's supernet student), image, seed; unset keys keep
// `defaults`. Throws ValueError for an unknown name or key or a malformed value.
std::pair<std::string, ModelOptions> parse_model_spec(const std::string& spec, ModelOptions defaults = {});

}  // namespace models
}  // namespace tandem
