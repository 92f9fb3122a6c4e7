// Module bookkeeping: registration, traversal, state dicts, generator states, train/eval, moves.
#include "models/module.h"

#include <cstring>
#include <functional>
#include <map>
#include <set>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/memory/memory.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/whole_number.h"

namespace tandem {
namespace models {

namespace {
std::string join(const std::string& prefix, const std::string& name) {
  return prefix.empty() ? name : prefix + "." + name;
}

std::string list_keys(const std::vector<std::string>& keys, size_t max_shown = 12) {
  std::ostringstream os;
  for (size_t i = 0; i < keys.size() && i < max_shown; ++i) os << (i ? ", " : "") << "'" << keys[i] << "'";
  if (keys.size() > max_shown) os << " and " << keys.size() - max_shown << " more";
  return os.str();
}
}  // namespace

Tensor parameter_tensor(const Shape& shape, DType dtype) {
  MemoryCategoryGuard guard(MemoryCategory::Parameters);
  return empty(shape, TensorOptions(dtype));
}

void Module::check_new_name(const std::string& name) const {
  TD_CHECK(!name.empty(), type_name_, ": a parameter, buffer or child needs a name");
  for (const auto& p : params_) TD_CHECK(p.name != name, type_name_, ": name '", name, "' is registered twice");
  for (const auto& b : buffers_) TD_CHECK(b.name != name, type_name_, ": name '", name, "' is registered twice");
  for (const auto& g : generators_) TD_CHECK(g.name != name, type_name_, ": name '", name, "' is registered twice");
  for (const auto& c : children_) TD_CHECK(c.first != name, type_name_, ": name '", name, "' is registered twice");
}

void Module::register_parameter(const std::string& name, Tensor* member, ParamKind kind) {
  check_new_name(name);
  TD_ASSERT(member && member->defined(), type_name_, ": parameter '", name, "' is undefined");
  if (!member->requires_grad()) member->set_requires_grad(true);
  params_.push_back({name, member, kind});
}

void Module::register_buffer(const std::string& name, Tensor* member) {
  check_new_name(name);
  TD_ASSERT(member && member->defined(), type_name_, ": buffer '", name, "' is undefined");
  buffers_.push_back({name, member});
}

void Module::register_generator(const std::string& name, Generator* member) {
  check_new_name(name);
  generators_.push_back({name, member});
}

void Module::add_child(const std::string& name, ModulePtr child) {
  check_new_name(name);
  TD_CHECK(child != nullptr, type_name_, ": child '", name, "' is null");
  children_.emplace_back(name, std::move(child));
}

void Module::visit(const std::string& prefix, const std::function<void(const std::string&, const Module&)>& fn) const {
  fn(prefix, *this);
  for (const auto& c : children_) c.second->visit(join(prefix, c.first), fn);
}

NamedTensors Module::named_parameters() const {
  NamedTensors out;
  visit("", [&](const std::string& path, const Module& m) {
    for (const auto& p : m.params_) out.emplace_back(join(path, p.name), *p.tensor);
  });
  return out;
}

NamedTensors Module::named_parameters(ParamKind kind) const {
  NamedTensors out;
  visit("", [&](const std::string& path, const Module& m) {
    for (const auto& p : m.params_)
      if (p.kind == kind) out.emplace_back(join(path, p.name), *p.tensor);
  });
  return out;
}

std::vector<Tensor> Module::parameters() const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters()) out.push_back(p.second);
  return out;
}

std::vector<Tensor> Module::parameters(ParamKind kind) const {
  std::vector<Tensor> out;
  for (auto& p : named_parameters(kind)) out.push_back(p.second);
  return out;
}

NamedTensors Module::named_buffers() const {
  NamedTensors out;
  visit("", [&](const std::string& path, const Module& m) {
    m.write_host_state();
    for (const auto& b : m.buffers_) out.emplace_back(join(path, b.name), *b.tensor);
  });
  return out;
}

std::vector<std::pair<std::string, Module*>> Module::named_modules() {
  std::vector<std::pair<std::string, Module*>> out;
  // Non-const access is fine: the traversal starts from this non-const module.
  visit("", [&](const std::string& path, const Module& m) { out.emplace_back(path, const_cast<Module*>(&m)); });
  return out;
}

int64_t Module::num_parameters() const {
  int64_t n = 0;
  for (const auto& p : named_parameters()) n += p.second.numel();
  return n;
}

std::vector<std::pair<std::string, Tensor*>> Module::state_slots() const {
  std::vector<std::pair<std::string, Tensor*>> out;
  visit("", [&](const std::string& path, const Module& m) {
    m.write_host_state();
    for (const auto& p : m.params_) out.emplace_back(join(path, p.name), p.tensor);
    for (const auto& b : m.buffers_) out.emplace_back(join(path, b.name), b.tensor);
  });
  return out;
}

NamedTensors Module::state_dict() const {
  std::vector<std::pair<std::string, Tensor*>> slots = state_slots();
  NamedTensors out;
  out.reserve(slots.size());
  for (const auto& s : slots) out.emplace_back(s.first, s.second->detach());
  return out;
}

void Module::load_state_dict(const NamedTensors& state, bool strict) {
  std::map<std::string, const Tensor*> given;
  for (const auto& kv : state) {
    TD_CHECK(given.emplace(kv.first, &kv.second).second, "load_state_dict: key '", kv.first, "' appears twice");
    TD_CHECK(kv.second.defined(), "load_state_dict: the tensor of key '", kv.first, "' is undefined");
  }
  std::vector<std::pair<std::string, Tensor*>> slots = state_slots();
  std::vector<std::string> missing;
  std::set<std::string> used;
  // Check everything before changing anything, so a bad file leaves the model as it was.
  for (const auto& s : slots) {
    auto it = given.find(s.first);
    if (it == given.end()) {
      missing.push_back(s.first);
      continue;
    }
    used.insert(s.first);
    const Tensor& src = *it->second;
    TD_CHECK_SHAPE(src.shape() == s.second->shape(), "load_state_dict: key '", s.first, "' has shape ",
                   shape_str(src.shape()), " in the checkpoint but ", shape_str(s.second->shape()), " in the ",
                   type_name_, " model");
    check_converts_exactly(src, s.second->dtype(), "load_state_dict: key '" + s.first + "'");
  }
  std::vector<std::string> unexpected;
  for (const auto& kv : state)
    if (!used.count(kv.first)) unexpected.push_back(kv.first);
  if (strict && (!missing.empty() || !unexpected.empty())) {
    std::ostringstream os;
    os << "load_state_dict into " << type_name_ << ":";
    if (!missing.empty()) os << " missing keys " << list_keys(missing) << ";";
    if (!unexpected.empty()) os << " unexpected keys " << list_keys(unexpected) << ";";
    TD_THROW(ValueError, os.str(), " (", slots.size(), " keys expected, ", state.size(), " given)");
  }
  {
    autograd::NoGradGuard ng;
    for (const auto& s : slots) {
      auto it = given.find(s.first);
      if (it != given.end()) s.second->copy_(*it->second);
    }
  }
  notify_loaded();
}

void Module::notify_loaded() {
  on_state_loaded();
  for (auto& c : children_) c.second->notify_loaded();
}

std::vector<std::pair<std::string, Generator*>> Module::generator_slots() const {
  std::vector<std::pair<std::string, Generator*>> out;
  visit("", [&](const std::string& path, const Module& m) {
    for (const auto& g : m.generators_) out.emplace_back(join(path, g.name), g.generator);
  });
  return out;
}

NamedTensors Module::rng_state() const {
  std::vector<std::pair<std::string, Generator*>> gens = generator_slots();
  NamedTensors out;
  for (const auto& g : gens) {
    int64_t seed, offset;
    uint64_t s = g.second->seed(), o = g.second->offset();
    std::memcpy(&seed, &s, 8);
    std::memcpy(&offset, &o, 8);
    out.emplace_back(g.first, from_vector<int64_t>({seed, offset}, {2}, Device::cpu()));
  }
  return out;
}

void Module::load_rng_state(const NamedTensors& state) {
  std::vector<std::pair<std::string, Generator*>> gens = generator_slots();
  std::map<std::string, Generator*> by_name(gens.begin(), gens.end());
  for (const auto& kv : state) {
    auto it = by_name.find(kv.first);
    TD_CHECK(it != by_name.end(), "load_rng_state: the model has no generator named '", kv.first, "'");
    TD_CHECK(kv.second.dtype() == DType::I64 && kv.second.shape() == Shape{2}, "load_rng_state: '", kv.first,
             "' must be an i64 tensor of shape [2], got ", dtype_name(kv.second.dtype()), " ",
             shape_str(kv.second.shape()));
    std::vector<int64_t> v = kv.second.to_vector<int64_t>();
    uint64_t seed, offset;
    std::memcpy(&seed, &v[0], 8);
    std::memcpy(&offset, &v[1], 8);
    it->second->set_state(seed, offset);
  }
}

void Module::train(bool on) {
  training_ = on;
  for (auto& c : children_) c.second->train(on);
}

void Module::zero_grad() {
  for (auto& p : named_parameters()) p.second.zero_grad();
}

void Module::replace_state(const std::function<Tensor(const Tensor&)>& convert) {
  std::vector<std::pair<std::string, Tensor*>> slots = state_slots();
  autograd::NoGradGuard ng;
  MemoryCategoryGuard guard(MemoryCategory::Parameters);
  for (const auto& s : slots) {
    Tensor& t = *s.second;
    Tensor converted = convert(t.detach());
    if (converted.storage().same(t.storage()) && converted.dtype() == t.dtype() && converted.strides() == t.strides())
      continue;  // unchanged
    bool rg = t.requires_grad();
    t = converted;
    if (rg) t.set_requires_grad(true);
  }
}

void Module::to(Device device) {
  replace_state([&](const Tensor& t) { return t.to(device); });
}

void Module::to(DType dtype) {
  TD_CHECK_DTYPE(is_compute_float(dtype), "Module::to: parameters can be f32 or f64, not ", dtype_name(dtype));
  replace_state([&](const Tensor& t) { return is_compute_float(t.dtype()) ? t.to(dtype) : t; });
}

void Module::to_channels_last() {
  replace_state([](const Tensor& t) { return t.dim() == 4 ? tandem::to_channels_last(t) : t; });
}

double Module::chain_flops(const Shape& input, const Module* branch) const {
  double total = 0;
  Shape s = input;
  for (const auto& child : children_) {
    const bool side = child.second.get() == branch;
    const Shape& in = side ? input : s;
    total += child.second->flops(in);
    if (!side) s = child.second->output_shape(in);
  }
  return total;
}

}  // namespace models
}  // namespace tandem
