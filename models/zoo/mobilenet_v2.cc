// MobileNetV2: inverted residual blocks and the network factory.
#include "models/zoo/mobilenet_v2.h"

#include <algorithm>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/tensor/ops.h"

namespace tandem {
namespace models {

int64_t make_divisible(double v, int64_t divisor) {
  int64_t rounded = static_cast<int64_t>(v + static_cast<double>(divisor) / 2) / divisor * divisor;
  int64_t out = std::max(divisor, rounded);
  if (static_cast<double>(out) < 0.9 * v) out += divisor;
  return out;
}

InvertedResidual::InvertedResidual(int64_t in, int64_t out, int64_t stride, int64_t expand, int64_t kernel,
                                   bool allow_residual, Generator& gen, const BatchNormSpec& bn)
    : Module("InvertedResidual"),
      in_(in),
      out_(out),
      stride_(stride),
      expand_(expand),
      kernel_(kernel),
      residual_(allow_residual && stride == 1 && in == out) {
  TD_CHECK(stride == 1 || stride == 2, "InvertedResidual: stride must be 1 or 2, got ", stride);
  TD_CHECK(expand >= 1 && kernel % 2 == 1, "InvertedResidual: expansion must be >= 1 and the kernel odd, got ", expand,
           " and ", kernel);
  int64_t hidden = in * expand;
  conv_ = std::make_shared<Sequential>();
  if (expand != 1) conv_->add(conv_bn_act(conv_spec(in, hidden, 1), Activation::ReLU6, false, gen, bn));
  conv_->add(conv_bn_act(conv_spec(hidden, hidden, kernel, stride, hidden), Activation::ReLU6, false, gen, bn));
  conv_->add(std::make_shared<Conv2d>(conv_spec(hidden, out, 1), gen));
  conv_->add(std::make_shared<BatchNorm2d>(out, bn));
  register_module("conv", conv_);
}

Tensor InvertedResidual::forward(const Tensor& x) {
  if (!residual_) return conv_->forward(x);
  // The shortcut's add fused into the last batch norm where models fuse.
  Tensor y = conv_->forward_bn_act(x, x, BnActivation::None);
  return y.defined() ? y : add(x, conv_->forward(x));
}

Shape InvertedResidual::output_shape(const Shape& input) const { return conv_->output_shape(input); }

std::string InvertedResidual::describe() const {
  std::ostringstream os;
  os << "InvertedResidual(" << in_ << ", " << out_ << ", kernel " << kernel_ << ", expand " << expand_ << ", stride "
     << stride_ << (residual_ ? ", residual" : "") << ")";
  return os.str();
}

std::shared_ptr<Network> make_mobilenet_v2(const ModelOptions& o) {
  TD_CHECK(o.num_classes > 0 && o.in_channels > 0, "MobileNetV2 needs positive num_classes and in_channels");
  TD_CHECK(o.width_mult > 0, "MobileNetV2 needs a positive width multiplier, got ", o.width_mult);
  double dropout = o.dropout < 0 ? 0.2 : o.dropout;
  // t (expansion), c (channels), n (blocks), s (stride of the first block).
  struct Stage {
    int64_t t, c, n, s;
  };
  const Stage stages[] = {
      {1, 16, 1, 1}, {6, 24, 2, o.cifar ? 1 : 2}, {6, 32, 3, 2}, {6, 64, 4, 2}, {6, 96, 3, 1}, {6, 160, 3, 2},
      {6, 320, 1, 1}};
  Generator gen(o.seed);
  auto net = std::make_shared<Network>("mobilenet_v2", o);
  int64_t in = make_divisible(32 * o.width_mult);
  int64_t last = make_divisible(1280 * std::max(1.0, o.width_mult));
  auto feature = [&](ModulePtr m) { net->add("features." + std::to_string(net->size()), std::move(m)); };
  feature(conv_bn_act(conv_spec(o.in_channels, in, 3, o.cifar ? 1 : 2), Activation::ReLU6, o.separable, gen));
  std::vector<size_t> starts{0};
  for (size_t si = 0; si < 7; ++si) {
    const Stage& st = stages[si];
    // The 16-channel block joins the 24-channel stage's block; the 320 stage's block takes the head too.
    if (si >= 2) starts.push_back(net->size());
    int64_t out = make_divisible(static_cast<double>(st.c) * o.width_mult);
    for (int64_t i = 0; i < st.n; ++i) {
      feature(std::make_shared<InvertedResidual>(in, out, i == 0 ? st.s : 1, st.t, 3, true, gen));
      in = out;
    }
  }
  feature(conv_bn_act(conv_spec(in, last, 1), Activation::ReLU6, false, gen));
  net->add("avgpool", std::make_shared<GlobalAvgPool>());
  auto classifier = std::make_shared<Sequential>();
  classifier->add(std::make_shared<Dropout>(dropout, gen.integer(1ull << 62)));
  classifier->add(std::make_shared<Linear>(last, o.num_classes, true, gen));
  net->add("classifier", classifier);
  init_like_torchvision(*net, LinearInit::Normal001, gen);
  net->set_block_starts(starts);
  return net;
}

}  // namespace models
}  // namespace tandem
