// Model registry and spec parsing.
#include "models/registry.h"

#include <cstdlib>
#include <functional>
#include <map>
#include <sstream>

#include "models/blocks.h"
#include "models/zoo/mobilenet_v2.h"
#include "models/zoo/resnet.h"
#include "models/zoo/vgg.h"
#include "runtime/base/error.h"

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

double parse_double(const std::string& v, const std::string& key, const std::string& spec) {
  char* end = nullptr;
  double d = v.empty() ? 0 : std::strtod(v.c_str(), &end);
  TD_CHECK(!v.empty() && end && *end == '\0', "model spec '", spec, "': ", key, "=", v, " is not a number");
  return d;
}

int64_t parse_int(const std::string& v, const std::string& key, const std::string& spec) {
  char* end = nullptr;
  long long i = v.empty() ? 0 : std::strtoll(v.c_str(), &end, 10);
  TD_CHECK(!v.empty() && end && *end == '\0', "model spec '", spec, "': ", key, "=", v, " is not an integer");
  return i;
}

bool parse_flag(const std::string& v, bool has_value, const std::string& key, const std::string& spec) {
  if (!has_value || v == "1" || v == "true") return true;
  TD_CHECK(v == "0" || v == "false", "model spec '", spec, "': ", key, "=", v, " must be 0/1 or true/false");
  return false;
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
  size_t colon = spec.find(':');
  std::string name = spec.substr(0, colon);
  bool known = false;
  for (const auto& n : model_names()) known = known || n == name;
  TD_CHECK(known, "unknown model '", name, "' in spec '", spec, "'; known models: ", known_names());
  if (colon == std::string::npos) return {name, o};
  std::stringstream items(spec.substr(colon + 1));
  std::string item;
  while (std::getline(items, item, ',')) {
    size_t eq = item.find('=');
    std::string key = item.substr(0, eq), value = eq == std::string::npos ? "" : item.substr(eq + 1);
    bool has_value = eq != std::string::npos;
    TD_CHECK(has_value || key == "cifar" || key == "separable", "model spec '", spec, "': key '", key,
             "' needs a value (", key, "=...)");
    if (key == "cifar")
      o.cifar = parse_flag(value, has_value, key, spec);
    else if (key == "separable")
      o.separable = parse_flag(value, has_value, key, spec);
    else if (key == "width")
      o.width = parse_int(value, key, spec);
    else if (key == "width_mult")
      o.width_mult = parse_double(value, key, spec);
    else if (key == "classes")
      o.num_classes = parse_int(value, key, spec);
    else if (key == "in_channels")
      o.in_channels = parse_int(value, key, spec);
    else if (key == "dropout")
      o.dropout = parse_double(value, key, spec);
    else if (key == "seed")
      o.seed = static_cast<uint64_t>(parse_int(value, key, spec));
    else if (key == "supernet")
      o.supernet_cells = parse_int(value, key, spec);
    else if (key == "image")
      o.image_size = parse_int(value, key, spec);
    else
      TD_THROW(ValueError, "model spec '", spec, "': unknown key '", key,
               "' (known: cifar, separable, width, width_mult, classes, in_channels, dropout, supernet, image, "
               "seed)");
  }
  return {name, o};
}

}  // namespace models
}  // namespace tandem
