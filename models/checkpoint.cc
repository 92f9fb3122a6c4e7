// Training checkpoints: one safetensors file with prefixed optimizer, scheduler and generator state.
#include "models/checkpoint.h"

#include "runtime/base/error.h"

namespace tandem {
namespace models {

namespace {
const char* const kOptimizer = "optimizer.";
const char* const kScheduler = "scheduler.";
const char* const kRng = "rng.";

bool has_prefix(const std::string& s, const std::string& prefix) { return s.rfind(prefix, 0) == 0; }

bool is_extra(const std::string& key) {
  return has_prefix(key, kOptimizer) || has_prefix(key, kScheduler) || has_prefix(key, kRng);
}

void append_prefixed(NamedTensors& out, const std::string& prefix, const NamedTensors& in) {
  for (const auto& kv : in) out.emplace_back(prefix + kv.first, kv.second);
}

NamedTensors take_prefixed(const NamedTensors& all, const std::string& prefix) {
  NamedTensors out;
  for (const auto& kv : all)
    if (has_prefix(kv.first, prefix)) out.emplace_back(kv.first.substr(prefix.size()), kv.second);
  return out;
}

NamedTensors model_part(const NamedTensors& all) {
  NamedTensors out;
  for (const auto& kv : all)
    if (!is_extra(kv.first)) out.push_back(kv);
  return out;
}

void load_model_part(const std::string& path, Module& model, const NamedTensors& state, bool strict) {
  try {
    model.load_state_dict(model_part(state), strict);
  } catch (const ShapeError& e) {
    TD_THROW(ShapeError, "checkpoint '", path, "': ", e.message());
  } catch (const ValueError& e) {
    TD_THROW(ValueError, "checkpoint '", path, "': ", e.message());
  }
}
}  // namespace

void save_checkpoint(const std::string& path, const Module& model, const optim::Optimizer* optimizer,
                     const optim::LrScheduler* scheduler, const SafetensorsMetadata& metadata) {
  NamedTensors all = model.state_dict();
  for (const auto& kv : all)
    TD_CHECK(!is_extra(kv.first), "save_checkpoint: model key '", kv.first,
             "' uses a prefix reserved for training state (optimizer., scheduler., rng.)");
  SafetensorsMetadata meta = metadata;
  meta["format"] = "pt";
  meta["tandem.checkpoint"] = "1";
  if (optimizer) {
    append_prefixed(all, kOptimizer, optimizer->state_dict());
    meta["tandem.optimizer"] = optimizer->name();
  }
  if (scheduler) append_prefixed(all, kScheduler, scheduler->state_dict());
  append_prefixed(all, kRng, model.rng_state());
  save_safetensors(path, all, meta);
}

SafetensorsMetadata load_checkpoint(const std::string& path, Module& model, optim::Optimizer* optimizer,
                                    optim::LrScheduler* scheduler) {
  SafetensorsContents c = load_safetensors(path);
  auto meta = [&](const std::string& key) {
    auto it = c.metadata.find(key);
    return it == c.metadata.end() ? std::string() : it->second;
  };
  // Refuse a mismatched optimizer or a missing part before changing anything.
  if (optimizer) {
    std::string saved = meta("tandem.optimizer");
    TD_CHECK(!saved.empty(), "checkpoint '", path, "' holds no optimizer state (not written by a training run?)");
    TD_CHECK(saved == optimizer->name(), "checkpoint '", path, "' was written with optimizer '", saved,
             "' but is being resumed with '", optimizer->name(), "'");
  }
  NamedTensors sched = take_prefixed(c.tensors, kScheduler);
  TD_CHECK(!scheduler || !sched.empty(), "checkpoint '", path, "' holds no learning-rate scheduler position");
  load_model_part(path, model, c.tensors, true);
  try {
    if (optimizer) optimizer->load_state_dict(take_prefixed(c.tensors, kOptimizer));
    if (scheduler) scheduler->load_state_dict(sched);
    model.load_rng_state(take_prefixed(c.tensors, kRng));
  } catch (const ShapeError& e) {
    TD_THROW(ShapeError, "checkpoint '", path, "': ", e.message());
  } catch (const ValueError& e) {
    TD_THROW(ValueError, "checkpoint '", path, "': ", e.message());
  }
  return c.metadata;
}

void load_weights(const std::string& path, Module& model, bool strict) {
  load_model_part(path, model, load_safetensors(path).tensors, strict);
}

}  // namespace models
}  // namespace tandem
