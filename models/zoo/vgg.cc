// VGG-16-BN factory.
#include "models/zoo/vgg.h"

#include "runtime/base/error.h"

namespace tandem {
namespace models {

std::shared_ptr<Network> make_vgg16_bn(const ModelOptions& o) {
  TD_CHECK(o.num_classes > 0 && o.in_channels > 0, "VGG needs positive num_classes and in_channels");
  const int64_t width = o.width > 0 ? o.width : 64;
  const double dropout = o.dropout < 0 ? 0.5 : o.dropout;
  // Channels per conv in multiples of the first stage's width; 0 is a max-pool (torchvision's config "D").
  const int cfg[] = {1, 1, 0, 2, 2, 0, 4, 4, 4, 0, 8, 8, 8, 0, 8, 8, 8, 0};
  Generator gen(o.seed);
  auto net = std::make_shared<Network>("vgg16_bn", o);
  auto feature = [&](ModulePtr m) { net->add("features." + std::to_string(net->size()), std::move(m)); };
  std::vector<size_t> starts{0};
  int64_t in = o.in_channels;
  for (int v : cfg) {
    if (v == 0) {
      feature(std::make_shared<MaxPool2d>(2, 2));
      if (starts.size() < 5) starts.push_back(net->size());
      continue;
    }
    int64_t out = width * v;
    Conv2dSpec spec = conv_spec(in, out, 3);
    spec.bias = true;
    feature(make_conv(spec, o.separable, gen));
    feature(std::make_shared<BatchNorm2d>(out));
    feature(std::make_shared<ReLU>());
    in = out;
  }
  const int64_t pooled = o.cifar ? in : in * 49;
  const int64_t hidden = o.cifar ? width * 8 : width * 64;
  if (o.cifar)
    net->add("avgpool", std::make_shared<GlobalAvgPool>());
  else
    net->add("avgpool", std::make_shared<AdaptiveAvgPoolFlatten>(7));
  auto classifier = std::make_shared<Sequential>();
  classifier->add(std::make_shared<Linear>(pooled, hidden, true, gen));
  classifier->add(std::make_shared<ReLU>());
  classifier->add(std::make_shared<Dropout>(dropout, gen.integer(1ull << 62)));
  classifier->add(std::make_shared<Linear>(hidden, hidden, true, gen));
  classifier->add(std::make_shared<ReLU>());
  classifier->add(std::make_shared<Dropout>(dropout, gen.integer(1ull << 62)));
  classifier->add(std::make_shared<Linear>(hidden, o.num_classes, true, gen));
  net->add("classifier", classifier);
  init_like_torchvision(*net, LinearInit::Normal001, gen);
  net->set_block_starts(starts);
  return net;
}

}  // namespace models
}  // namespace tandem
