// Shared building pieces of the zoo.
#include "models/zoo/common.h"

#include "models/init.h"
#include "runtime/base/error.h"

namespace tandem {
namespace models {

ModulePtr make_activation(Activation a) {
  switch (a) {
    case Activation::None: return nullptr;
    case Activation::ReLU: return std::make_shared<ReLU>();
    case Activation::ReLU6: return std::make_shared<ReLU6>();
  }
  TD_THROW(InternalError, "unknown activation");
}

Conv2dSpec conv_spec(int64_t in, int64_t out, int64_t kernel, int64_t stride, int64_t groups) {
  Conv2dSpec s;
  s.in_channels = in;
  s.out_channels = out;
  s.kernel = kernel;
  s.stride = stride;
  s.padding = kernel / 2;
  s.groups = groups;
  return s;
}

ModulePtr make_conv(const Conv2dSpec& spec, bool separable, Generator& gen) {
  if (!separable || spec.kernel == 1 || spec.groups != 1) return std::make_shared<Conv2d>(spec, gen);
  Conv2dSpec dw = spec;
  dw.out_channels = spec.in_channels;
  dw.groups = spec.in_channels;
  dw.bias = false;
  Conv2dSpec pw;
  pw.in_channels = spec.in_channels;
  pw.out_channels = spec.out_channels;
  pw.bias = spec.bias;
  auto seq = std::make_shared<Sequential>();
  seq->add(std::make_shared<Conv2d>(dw, gen));
  seq->add(std::make_shared<BatchNorm2d>(spec.in_channels));
  seq->add(std::make_shared<ReLU>());
  seq->add(std::make_shared<Conv2d>(pw, gen));
  return seq;
}

std::shared_ptr<Sequential> conv_bn_act(const Conv2dSpec& spec, Activation act, bool separable, Generator& gen,
                                        const BatchNormSpec& bn) {
  auto seq = std::make_shared<Sequential>();
  seq->add(make_conv(spec, separable, gen));
  seq->add(std::make_shared<BatchNorm2d>(spec.out_channels, bn));
  if (act != Activation::None) seq->add(make_activation(act));
  return seq;
}

void init_like_torchvision(Module& model, LinearInit linear, Generator& gen) {
  for (auto& nm : model.named_modules()) {
    Module* m = nm.second;
    if (auto* conv = dynamic_cast<Conv2d*>(m)) {
      init::kaiming_normal_fan_out(conv->weight, gen);
      if (conv->bias.defined()) init::constant(conv->bias, 0.0);
    } else if (auto* bn = dynamic_cast<BatchNorm2d*>(m)) {
      if (bn->weight.defined()) {
        init::constant(bn->weight, 1.0);
        init::constant(bn->bias, 0.0);
      }
    } else if (auto* lin = dynamic_cast<Linear*>(m)) {
      if (linear == LinearInit::Normal001) {
        init::normal(lin->weight, 0.0, 0.01, gen);
        if (lin->bias.defined()) init::constant(lin->bias, 0.0);
      }
    }
  }
}

}  // namespace models
}  // namespace tandem
