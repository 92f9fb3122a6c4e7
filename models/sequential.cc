// Sequential containers.
#include "models/sequential.h"

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

Tensor Sequential::forward(const Tensor& x) {
  Tensor y = x;
  for (const auto& c : named_children()) y = c.second->forward(y);
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
