// Sequential containers.
#include "models/sequential.h"

#include "models/layers.h"
#include "runtime/base/error.h"

namespace tandem {
namespace models {

Sequential::Sequential(const std::vector<ModulePtr>& items) : Module("Sequential") {
  for (const auto& m : items) add(m);
}

Sequential& Sequential::add(ModulePtr item) { return add(std::to_string(size()), std::move(item)); }

Sequential& Sequential::add(const std::string& name, ModulePtr item) {
  // A Sequential wrapping existing modules takes the mode of its first item instead of imposing its own.
  if (empty()) set_own_training_flag(item->is_training());
  add_child(name, std::move(item));
  return *this;
}

Tensor Sequential::forward(const Tensor& x) { return run(x, size()); }

Tensor Sequential::forward_bn_act(const Tensor& x, const Tensor& residual, BnActivation act) {
  auto* bn = empty() ? nullptr : dynamic_cast<BatchNorm2d*>(at(size() - 1).get());
  if (bn == nullptr || !batch_norm_fusion()) return Tensor();
  return bn->forward_act(run(x, size() - 1), residual, act);
}

Tensor Sequential::run(const Tensor& x, size_t end) {
  Tensor y = x;
  const auto& items = named_children();
  for (size_t i = 0; i < end; ++i) {
    // A batch norm followed by ReLU or ReLU6 (conv-bn-relu(6)) runs as one fused op.
    auto* bn = dynamic_cast<BatchNorm2d*>(items[i].second.get());
    Module* next = i + 1 < end ? items[i + 1].second.get() : nullptr;
    const BnActivation act = dynamic_cast<ReLU*>(next)    ? BnActivation::Relu
                             : dynamic_cast<ReLU6*>(next) ? BnActivation::Relu6
                                                          : BnActivation::None;
    if (bn != nullptr && act != BnActivation::None && batch_norm_fusion()) {
      y = bn->forward_act(y, Tensor(), act);
      ++i;
    } else {
      y = items[i].second->forward(y);
    }
  }
  return y;
}

Shape Sequential::output_shape(const Shape& input) const {
  Shape s = input;
  for (const auto& c : named_children()) {
    try {
      s = c.second->output_shape(s);
    } catch (const ShapeError& e) {
      // A nested Sequential already named its item: extend that path ("item 'layer1.conv1' ...").
      const std::string tag = "item '";
      if (e.message().rfind(tag, 0) == 0) TD_THROW(ShapeError, tag, c.first, ".", e.message().substr(tag.size()));
      TD_THROW(ShapeError, tag, c.first, "' (", c.second->describe(), "): ", e.message());
    }
  }
  return s;
}

}  // namespace models
}  // namespace tandem
