// ResNet: residual blocks and the network factory.
#include "models/zoo/resnet.h"

#include "runtime/base/error.h"
#include "runtime/tensor/ops.h"

namespace tandem {
namespace models {

namespace {
// torchvision's downsample: conv1x1(stride) + BN, when the shortcut changes shape.
ModulePtr downsample(int64_t in, int64_t out, int64_t stride, Generator& gen) {
  if (stride == 1 && in == out) return nullptr;
  auto seq = std::make_shared<Sequential>();
  seq->add(std::make_shared<Conv2d>(conv_spec(in, out, 1, stride), gen));
  seq->add(std::make_shared<BatchNorm2d>(out));
  return seq;
}

Shape shortcut_sum_shape(const Shape& body, const ModulePtr& downsample, const Shape& input, const char* who) {
  Shape shortcut = downsample ? downsample->output_shape(input) : input;
  TD_CHECK_SHAPE(body == shortcut, who, ": the body gives ", shape_str(body), " but the shortcut ", shape_str(shortcut),
                 " for input ", shape_str(input));
  return body;
}
}  // namespace

BasicBlock::BasicBlock(int64_t in, int64_t planes, int64_t stride, bool separable, Generator& gen)
    : Module("BasicBlock") {
  conv1_ = register_module("conv1", make_conv(conv_spec(in, planes, 3, stride), separable, gen));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2_ = register_module("conv2", make_conv(conv_spec(planes, planes, 3), separable, gen));
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  downsample_ = downsample(in, planes * kExpansion, stride, gen);
  if (downsample_) register_module("downsample", downsample_);
}

Tensor BasicBlock::forward(const Tensor& x) {
  Tensor y = bn1_->forward_act(conv1_->forward(x), Tensor(), BnActivation::Relu);
  Tensor shortcut = downsample_ ? downsample_->forward(x) : x;
  return bn2_->forward_act(conv2_->forward(y), shortcut, BnActivation::Relu);
}

Shape BasicBlock::output_shape(const Shape& input) const {
  Shape s = bn2_->output_shape(conv2_->output_shape(bn1_->output_shape(conv1_->output_shape(input))));
  return shortcut_sum_shape(s, downsample_, input, "BasicBlock");
}

Bottleneck::Bottleneck(int64_t in, int64_t planes, int64_t stride, bool separable, Generator& gen)
    : Module("Bottleneck") {
  conv1_ = register_module("conv1", std::make_shared<Conv2d>(conv_spec(in, planes, 1), gen));
  bn1_ = register_module("bn1", std::make_shared<BatchNorm2d>(planes));
  conv2_ = register_module("conv2", make_conv(conv_spec(planes, planes, 3, stride), separable, gen));
  bn2_ = register_module("bn2", std::make_shared<BatchNorm2d>(planes));
  conv3_ = register_module("conv3", std::make_shared<Conv2d>(conv_spec(planes, planes * kExpansion, 1), gen));
  bn3_ = register_module("bn3", std::make_shared<BatchNorm2d>(planes * kExpansion));
  downsample_ = downsample(in, planes * kExpansion, stride, gen);
  if (downsample_) register_module("downsample", downsample_);
}

Tensor Bottleneck::forward(const Tensor& x) {
  Tensor y = bn1_->forward_act(conv1_->forward(x), Tensor(), BnActivation::Relu);
  y = bn2_->forward_act(conv2_->forward(y), Tensor(), BnActivation::Relu);
  Tensor shortcut = downsample_ ? downsample_->forward(x) : x;
  return bn3_->forward_act(conv3_->forward(y), shortcut, BnActivation::Relu);
}

Shape Bottleneck::output_shape(const Shape& input) const {
  Shape s = bn1_->output_shape(conv1_->output_shape(input));
  s = bn2_->output_shape(conv2_->output_shape(s));
  s = bn3_->output_shape(conv3_->output_shape(s));
  return shortcut_sum_shape(s, downsample_, input, "Bottleneck");
}

namespace {
template <typename BlockT>
std::shared_ptr<Sequential> make_layer(int64_t& in, int64_t planes, int count, int64_t stride, bool separable,
                                       Generator& gen) {
  auto layer = std::make_shared<Sequential>();
  for (int i = 0; i < count; ++i) {
    layer->add(std::make_shared<BlockT>(in, planes, i == 0 ? stride : 1, separable, gen));
    in = planes * BlockT::kExpansion;
  }
  return layer;
}

template <typename BlockT>
void add_stages(Network& net, const int (&counts)[4], int64_t width, bool separable, Generator& gen,
                std::vector<size_t>& starts) {
  int64_t in = width;
  for (int s = 0; s < 4; ++s) {
    if (s > 0) starts.push_back(net.size());
    net.add("layer" + std::to_string(s + 1),
            make_layer<BlockT>(in, width << s, counts[s], s == 0 ? 1 : 2, separable, gen));
  }
}
}  // namespace

std::shared_ptr<Network> make_resnet(int depth, const ModelOptions& o) {
  static const int k18[4] = {2, 2, 2, 2}, k34[4] = {3, 4, 6, 3};
  TD_CHECK(depth == 18 || depth == 34 || depth == 50, "ResNet depth must be 18, 34 or 50, got ", depth);
  TD_CHECK(o.num_classes > 0 && o.in_channels > 0, "ResNet needs positive num_classes and in_channels");
  const int64_t width = o.width > 0 ? o.width : 64;
  Generator gen(o.seed);
  auto net = std::make_shared<Network>("resnet" + std::to_string(depth), o);
  Conv2dSpec stem = o.cifar ? conv_spec(o.in_channels, width, 3, 1) : conv_spec(o.in_channels, width, 7, 2);
  net->add("conv1", make_conv(stem, o.separable, gen));
  net->add("bn1", std::make_shared<BatchNorm2d>(width));
  net->add("relu", std::make_shared<ReLU>());
  if (!o.cifar) net->add("maxpool", std::make_shared<MaxPool2d>(3, 2, 1));
  std::vector<size_t> starts{0};
  if (depth == 50)
    add_stages<Bottleneck>(*net, k34, width, o.separable, gen, starts);
  else
    add_stages<BasicBlock>(*net, depth == 18 ? k18 : k34, width, o.separable, gen, starts);
  int64_t features = (width << 3) * (depth == 50 ? Bottleneck::kExpansion : BasicBlock::kExpansion);
  net->add("avgpool", std::make_shared<GlobalAvgPool>());
  net->add("fc", std::make_shared<Linear>(features, o.num_classes, true, gen));
  init_like_torchvision(*net, LinearInit::Default, gen);
  net->set_block_starts(starts);
  return net;
}

}  // namespace models
}  // namespace tandem
