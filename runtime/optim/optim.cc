// SGD, Adam and AdamW: state bookkeeping around the fused update ops.
#include "runtime/optim/optim.h"

#include <cmath>
#include <set>
#include <tuple>

#include "runtime/base/error.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/memory/memory.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/layout.h"
#include "runtime/tensor/whole_number.h"

namespace tandem {
namespace optim {

namespace {

// Tensors of one fused call: same device, dtype and a shared property (first step, step count).
struct Bucket {
  Device device;
  DType dtype;
  int64_t key;
  std::vector<Tensor> params, grads, a, b;
  const int64_t* step = nullptr;  // Adam: the step count of its parameters (all equal), read by CUDA graph replays
};

Bucket& bucket_for(std::vector<Bucket>& buckets, const Tensor& p, int64_t key) {
  for (Bucket& b : buckets)
    if (b.device == p.device() && b.dtype == p.dtype() && b.key == key) return b;
  buckets.push_back(Bucket{p.device(), p.dtype(), key, {}, {}, {}, {}, nullptr});
  return buckets.back();
}

// A step's loop: per group, each (name, parameter) with a gradient goes with it into the bucket that
// file(buckets, parameter) picks (adding the parameter's state tensors to it), then run(group, bucket) makes
// each bucket's fused call.
template <typename Groups, typename File, typename Run>
void step_in_buckets(const Groups& groups, File file, Run run) {
  autograd::NoGradGuard ng;
  for (const auto& g : groups) {
    std::vector<Bucket> buckets;
    for (const auto& p : g.params) {
      Tensor grad = p.second.grad();
      if (!grad.defined()) continue;
      Bucket& b = file(buckets, p);
      b.params.push_back(p.second);
      b.grads.push_back(in_layout_of(grad, p.second));  // a copy only for a gradient set in another layout
    }
    for (Bucket& b : buckets) run(g, b);
  }
}

Tensor state_like(const Tensor& p, bool zero) {
  MemoryCategoryGuard guard(MemoryCategory::OptimizerState);
  Tensor t = empty_like(p);  // in p's layout: the fused step reads both as flat arrays
  if (zero) t.fill_(0.0);
  return t;
}

// Copies a checkpoint tensor into fresh state for parameter p, checking its shape.
Tensor restore_like(const Tensor& p, const Tensor& saved, const std::string& key) {
  TD_CHECK_SHAPE(saved.shape() == p.shape(), "optimizer state '", key, "' has shape ", shape_str(saved.shape()),
                 " but the parameter has shape ", shape_str(p.shape()));
  Tensor t = state_like(p, false);
  t.copy_(saved);
  return t;
}

// Splits "<param>.<field>" at the last dot.
std::pair<std::string, std::string> split_key(const std::string& key) {
  size_t dot = key.rfind('.');
  TD_CHECK(dot != std::string::npos && dot > 0, "optimizer state key '", key, "' is not '<param>.<field>'");
  return {key.substr(0, dot), key.substr(dot + 1)};
}

// The CUDA graph capture of this thread when it captures work of `device` (an optimizer step in it reads its learning
// rate and step count from device memory that each replay sets), else nullptr.
GraphCapture* capture_on(Device device) {
  GraphCapture* c = active_capture();
  return c != nullptr && c->stream().device() == device ? c : nullptr;
}

void check_hyper(double lr, double weight_decay, const char* who) {
  TD_CHECK(lr >= 0, who, ": learning rate must be non-negative, got ", lr);
  TD_CHECK(weight_decay >= 0, who, ": weight decay must be non-negative, got ", weight_decay);
}

}  // namespace

std::vector<ParamGroup> single_group(const NamedTensors& params) {
  ParamGroup g;
  g.params = params;
  return {g};
}

Optimizer::Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const char* who) {
  check_hyper(lr, weight_decay, who);
  std::set<std::string> names;
  std::set<const TensorImpl*> tensors;
  for (size_t gi = 0; gi < groups.size(); ++gi) {
    ParamGroup& pg = groups[gi];
    Group g;
    g.lr = g.initial_lr = pg.lr.value_or(lr);
    g.weight_decay = pg.weight_decay.value_or(weight_decay);
    check_hyper(g.lr, g.weight_decay, who);
    for (auto& p : pg.params) {
      TD_CHECK(p.second.defined(), who, ": parameter '", p.first, "' of group ", gi, " is undefined");
      TD_CHECK(p.second.is_leaf(), who, ": parameter '", p.first, "' is not a leaf tensor");
      TD_CHECK_DTYPE(is_compute_float(p.second.dtype()), who, ": parameter '", p.first, "' is ",
                     dtype_name(p.second.dtype()), "; optimizers update f32 and f64 parameters");
      TD_CHECK(names.insert(p.first).second, who, ": parameter name '", p.first, "' appears twice");
      TD_CHECK(tensors.insert(p.second.impl()).second, who, ": parameter '", p.first,
               "' is the same tensor as another parameter");
    }
    g.params = std::move(pg.params);
    groups_.push_back(std::move(g));
  }
}

void Optimizer::zero_grad(bool set_to_none) {
  autograd::NoGradGuard ng;
  for (auto& g : groups_)
    for (auto& p : g.params) {
      Tensor grad = p.second.grad();
      if (set_to_none || !grad.defined())
        p.second.zero_grad();
      else
        grad.fill_(0.0);
    }
}

void Optimizer::set_lr(size_t g, double lr) {
  TD_CHECK(lr >= 0, name(), ": learning rate must be non-negative, got ", lr);
  groups_.at(g).lr = lr;
}

// ---- SGD ----

Sgd::Sgd(std::vector<ParamGroup> groups, const SgdOptions& o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, "SGD"), o_(o) {
  TD_CHECK(o.momentum >= 0 && o.dampening >= 0, "SGD: momentum and dampening must be non-negative, got ", o.momentum,
           " and ", o.dampening);
  TD_CHECK(!o.nesterov || (o.momentum > 0 && o.dampening == 0),
           "SGD: Nesterov momentum needs momentum > 0 and dampening 0");
}

void Sgd::step() {
  step_in_buckets(
      groups_,
      [&](std::vector<Bucket>& buckets, const std::pair<std::string, Tensor>& p) -> Bucket& {
        // Fresh momentum buffers are set to the first update by the fused op (first_step), so they go to
        // their own call.
        auto it = momentum_.find(p.first);
        bool first = o_.momentum != 0 && it == momentum_.end();
        if (first) it = momentum_.emplace(p.first, state_like(p.second, false)).first;
        Bucket& b = bucket_for(buckets, p.second, first);
        if (o_.momentum != 0) b.a.push_back(it->second);
        return b;
      },
      [&](const Group& g, Bucket& b) {
        SgdHyper h;
        h.lr = g.lr;
        h.momentum = o_.momentum;
        h.dampening = o_.dampening;
        h.weight_decay = g.weight_decay;
        h.nesterov = o_.nesterov;
        h.first_step = b.key != 0;
        if (GraphCapture* c = capture_on(b.device)) {
          const Group* group = &g;
          h.device_lr = c->replay_double([group] { return group->lr; });
        }
        sgd_step_(b.params, b.grads, b.a, h);
      });
}

NamedTensors Sgd::state_dict() const {
  NamedTensors out;
  for (const Group& g : groups_)
    for (const auto& p : g.params) {
      auto it = momentum_.find(p.first);
      if (it != momentum_.end()) out.emplace_back(p.first + ".momentum_buffer", it->second);
    }
  return out;
}

void Sgd::load_state_dict(const NamedTensors& state) {
  std::map<std::string, Tensor> params;
  for (const Group& g : groups_)
    for (const auto& p : g.params) params.emplace(p.first, p.second);
  std::map<std::string, Tensor> restored;
  for (const auto& kv : state) {
    auto nf = split_key(kv.first);
    auto it = params.find(nf.first);
    TD_CHECK(it != params.end(), "SGD state key '", kv.first, "' names no parameter of this optimizer");
    TD_CHECK(nf.second == "momentum_buffer", "SGD state key '", kv.first, "': unknown field '", nf.second, "'");
    TD_CHECK(o_.momentum != 0, "SGD state key '", kv.first, "' holds a momentum buffer but momentum is 0");
    restored[nf.first] = restore_like(it->second, kv.second, kv.first);
  }
  momentum_ = std::move(restored);
}

int64_t Sgd::planned_state_bytes() const {
  if (o_.momentum == 0) return 0;
  int64_t n = 0;
  for (const Group& g : groups_)
    for (const auto& p : g.params) n += static_cast<int64_t>(p.second.nbytes());
  return n;
}

// ---- Adam / AdamW ----

AdamOptions adamw_options(double lr, double weight_decay) {
  AdamOptions o;
  o.lr = lr;
  o.weight_decay = weight_decay;
  o.decoupled_weight_decay = true;
  return o;
}

Adam::Adam(std::vector<ParamGroup> groups, const AdamOptions& o)
    : Optimizer(std::move(groups), o.lr, o.weight_decay, o.decoupled_weight_decay ? "AdamW" : "Adam"), o_(o) {
  TD_CHECK(o.beta1 >= 0 && o.beta1 < 1 && o.beta2 >= 0 && o.beta2 < 1, name(), ": betas must be in [0, 1), got ",
           o.beta1, ", ", o.beta2);
  TD_CHECK(o.eps >= 0, name(), ": eps must be non-negative, got ", o.eps);
}

void Adam::step() {
  step_in_buckets(
      groups_,
      [&](std::vector<Bucket>& buckets, const std::pair<std::string, Tensor>& p) -> Bucket& {
        auto it = state_.find(p.first);
        if (it == state_.end())
          it = state_.emplace(p.first, State{state_like(p.second, true), state_like(p.second, true), 0}).first;
        State& s = it->second;
        // A capture runs no update: each replay counts its step.
        const int64_t step = s.step + 1;
        if (GraphCapture* c = capture_on(p.second.device()))
          c->on_replay([count = &s.step] { ++*count; });
        else
          s.step = step;
        Bucket& b = bucket_for(buckets, p.second, step);
        b.a.push_back(s.exp_avg);
        b.b.push_back(s.exp_avg_sq);
        b.step = &s.step;
        return b;
      },
      [&](const Group& g, Bucket& b) {
        AdamHyper h;
        h.lr = g.lr;
        h.beta1 = o_.beta1;
        h.beta2 = o_.beta2;
        h.eps = o_.eps;
        h.weight_decay = g.weight_decay;
        h.decoupled_weight_decay = o_.decoupled_weight_decay;
        h.step = b.key;
        if (GraphCapture* c = capture_on(b.device)) {
          // The same formulas as the eager kernels' coefficients, from the step and rate of each replay.
          const Group* group = &g;
          const int64_t* count = b.step;
          const double b1 = o_.beta1, b2 = o_.beta2;
          h.device_coefs = c->replay_double(
              [group, count, b1] { return group->lr / (1.0 - std::pow(b1, static_cast<double>(*count))); });
          const double* bc2 = c->replay_double([count, b2] { return 1.0 - std::pow(b2, static_cast<double>(*count)); });
          const double* decay = c->replay_double([group] { return 1.0 - group->lr * group->weight_decay; });
          TD_ASSERT(bc2 == h.device_coefs + 1 && decay == h.device_coefs + 2, "replay values are not consecutive");
        }
        adam_step_(b.params, b.grads, b.a, b.b, h);
      });
}

NamedTensors Adam::state_dict() const {
  NamedTensors out;
  for (const Group& g : groups_)
    for (const auto& p : g.params) {
      auto it = state_.find(p.first);
      if (it == state_.end()) continue;
      out.emplace_back(p.first + ".exp_avg", it->second.exp_avg);
      out.emplace_back(p.first + ".exp_avg_sq", it->second.exp_avg_sq);
      out.emplace_back(p.first + ".step", scalar_tensor(static_cast<double>(it->second.step),
                                                        TensorOptions(DType::I64).with_device(Device::cpu())));
    }
  return out;
}

void Adam::load_state_dict(const NamedTensors& state) {
  std::map<std::string, Tensor> params;
  for (const Group& g : groups_)
    for (const auto& p : g.params) params.emplace(p.first, p.second);
  std::map<std::string, State> restored;
  std::map<std::string, int> fields_seen;
  for (const auto& kv : state) {
    auto nf = split_key(kv.first);
    auto it = params.find(nf.first);
    TD_CHECK(it != params.end(), name(), " state key '", kv.first, "' names no parameter of this optimizer");
    State& s = restored[nf.first];
    if (nf.second == "exp_avg") {
      s.exp_avg = restore_like(it->second, kv.second, kv.first);
    } else if (nf.second == "exp_avg_sq") {
      s.exp_avg_sq = restore_like(it->second, kv.second, kv.first);
    } else if (nf.second == "step") {
      s.step = whole_number(kv.second, name() + " state key '" + kv.first + "'");
      TD_CHECK(s.step > 0, name(), " state key '", kv.first, "' holds step ", s.step, "; it must be positive");
    } else {
      TD_THROW(ValueError, name(), " state key '", kv.first, "': unknown field '", nf.second, "'");
    }
    ++fields_seen[nf.first];
  }
  for (const auto& f : fields_seen)
    TD_CHECK(f.second == 3 && restored[f.first].exp_avg.defined() && restored[f.first].exp_avg_sq.defined(), name(),
             " state of parameter '", f.first, "' is incomplete: it needs exp_avg, exp_avg_sq and step");
  state_ = std::move(restored);
}

int64_t Adam::planned_state_bytes() const {
  int64_t n = 0;
  for (const Group& g : groups_)
    for (const auto& p : g.params) n += 2 * static_cast<int64_t>(p.second.nbytes());
  return n;
}

std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, const NamedTensors& params) {
  if (spec.kind == "sgd") {
    SgdOptions o;
    o.lr = spec.lr;
    o.momentum = spec.momentum;
    o.nesterov = spec.nesterov && spec.momentum > 0;
    o.weight_decay = spec.weight_decay;
    return std::make_unique<Sgd>(single_group(params), o);
  }
  if (spec.kind == "adam" || spec.kind == "adamw") {
    AdamOptions o = spec.kind == "adamw" ? adamw_options(spec.lr, spec.weight_decay) : AdamOptions{};
    o.lr = spec.lr;
    o.weight_decay = spec.weight_decay;
    return std::make_unique<Adam>(single_group(params), o);
  }
  TD_THROW(ValueError, "unknown optimizer '", spec.kind, "' (known: sgd, adam, adamw)");
}

}  // namespace optim
}  // namespace tandem
