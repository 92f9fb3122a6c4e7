// Sequential: a chain of named modules run in order. Item names may be dotted paths ("features.3"), so a
// flat chain can carry torchvision's nested key names.
#pragma once

#include <string>
#include <vector>

#include "models/module.h"
#include "runtime/nn/nn_ops.h"

namespace tandem {
namespace models {

class Sequential : public Module {
 public:
  Sequential() : Module("Sequential") {}
  explicit Sequential(const std::vector<ModulePtr>& items);  // named "0", "1", ...

  // Appends an item named by its position, or by `name`. The first item's train/eval mode becomes the
  // Sequential's own (its items keep theirs).
  Sequential& add(ModulePtr item);
  Sequential& add(const std::string& name, ModulePtr item);

  Tensor forward(const Tensor& x) override;
  // act(forward(x) + residual) with the last item, a BatchNorm2d, fused with the add and act (batch_norm_act); an
  // undefined tensor, having run nothing, when the last item is no batch norm or fusion is off.
  Tensor forward_bn_act(const Tensor& x, const Tensor& residual, BnActivation act);
  // Chains the items' shapes; a misfit names the item ("item 'layer2' (Conv2d(...)): ...").
  Shape output_shape(const Shape& input) const override;

  // A plain Sequential is a chain a partitioner may cut; subclasses (whole networks) are not, unless they say so.
  bool splits_into_units() const override { return is_plain_; }

  size_t size() const { return named_children().size(); }
  bool empty() const { return named_children().empty(); }
  const ModulePtr& at(size_t i) const { return named_children().at(i).second; }
  const std::string& name_at(size_t i) const { return named_children().at(i).first; }

  // A label for messages ("block 2 (features.7 .. features.10)"); empty by default.
  const std::string& label() const { return label_; }
  void set_label(std::string label) { label_ = std::move(label); }

 protected:
  explicit Sequential(std::string type_name) : Module(std::move(type_name)), is_plain_(false) {}

 private:
  // Runs the first `end` items (a batch norm and the ReLU(6) after it as one fused op).
  Tensor run(const Tensor& x, size_t end);

  std::string label_;
  bool is_plain_ = true;
};

}  // namespace models
}  // namespace tandem
