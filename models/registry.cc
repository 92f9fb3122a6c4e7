// Model registry and spec parsing.
#include "models/registry.h"

#include <functional>
#include <map>
#include <sstream>

#include "models/blocks.h"
#include "models/zoo/mobilenet_v2.h"
#include "models/zoo/resnet.h"
#include "models/zoo/vgg.h"
#include "runtime/base/error.h"
#include "runtime/base/spec_reader.h"

namespace tandem {
namespace models {

namespace {
using Factory = std::function<std::shared_ptr<Network>(const ModelOptions&)>;

const std::vector<std::pair<std::string, Factory>>& registry() {
  static const std::vector<std::pair<std::string, Factory>> r = {
      {"resnet18", [](const ModelOptions& o) { return make_resnet(18, o); }},
      {"resnet34", [](const ModelOptions& o) { return make_resnet(34, o); }},
      {"resnet50", [](const ModelOptions& o) { return make_resnet(50, o); }},
      {"mobilenet_v2", make_mobilenet_v2},
      {"vgg16_bn", make_vgg16_bn},
  };
  return r;
}

std::string known_names() {
  std::ostringstream os;
  for (const auto& n : model_names()) os << (os.tellp() > 0 ? ", " : "") << n;
  return os.str();
}

}  // namespace

std::vector<std::string> model_names() {
  std::vector<std::string> out;
  for (const auto& r : registry()) out.push_back(r.first);
  return out;
}

namespace {
// The supernet student of `name` built with `options` (see ModelOptions::supernet_cells).
std::shared_ptr<Network> make_supernet_student(const std::string& name, const ModelOptions& options) {
  ModelOptions teacher_options = options;
  teacher_options.supernet_cells = 0;
  teacher_options.image_size = 0;
  std::shared_ptr<Network> teacher = make_model(name, teacher_options);
  Shape input = teacher->default_input_shape(1);
  if (options.image_size > 0) input[2] = input[3] = options.image_size;
  StudentOptions so;
  so.kind = StudentKind::Supernet;
  so.supernet.cells = options.supernet_cells;
  so.seed = options.seed;
  std::vector<ModulePtr> blocks = make_student_blocks(*teacher, input, so);
  auto student = std::make_shared<Network>(name, options);
  std::vector<size_t> starts;
  for (size_t b = 0; b < blocks.size(); ++b) {
    starts.push_back(b);
    student->add("block" + std::to_string(b), blocks[b]);
  }
  student->set_block_starts(starts);
  return student;
}
}  // namespace

std::shared_ptr<Network> make_model(const std::string& name, const ModelOptions& options) {
  TD_CHECK(options.supernet_cells >= 0 && options.image_size >= 0, "model '", name,
           "': supernet and image must not be negative");
  for (const auto& r : registry()) {
    if (r.first != name) continue;
    return options.supernet_cells > 0 ? make_supernet_student(name, options) : r.second(options);
  }
  TD_THROW(ValueError, "unknown model '", name, "'; known models: ", known_names());
}

std::pair<std::string, ModelOptions> parse_model_spec(const std::string& spec, ModelOptions o) {
  const SpecReader r("model spec", spec);
  const std::string name = r.name();
  bool known = false;
  for (const auto& n : model_names()) known = known || n == name;
  if (!known) r.fail("unknown model '", name, "'; known models: ", known_names());
  SpecKeys keys(r, ',');
  o.cifar = keys.flag("cifar", o.cifar);
  o.separable = keys.flag("separable", o.separable);
  o.width = keys.integer("width", o.width);
  o.width_mult = keys.finite("width_mult", o.width_mult);
  o.num_classes = keys.integer("classes", o.num_classes);
  o.in_channels = keys.integer("in_channels", o.in_channels);
  o.dropout = keys.finite("dropout", o.dropout);
  o.supernet_cells = keys.integer("supernet", o.supernet_cells);
  o.image_size = keys.integer("image", o.image_size);
  o.seed = static_cast<uint64_t>(keys.integer("seed", static_cast<int64_t>(o.seed)));
  keys.finish();
  return {name, o};
}

}  // namespace models
}  // namespace tandem
