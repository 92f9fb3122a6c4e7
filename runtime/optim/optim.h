// Optimizers: SGD (momentum, Nesterov, dampening, weight decay), Adam and AdamW over parameter groups.
// Updates run through the fused sgd_step_ / adam_step_ of nn_ops.h: one call per group (and per device,
// dtype and state age within it). Parameters without a gradient are skipped, as in PyTorch. make_optimizer
// builds one from a spec (kind and hyperparameters), as tools:train and Pipe-BD's blocks do.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "runtime/formats/safetensors.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace optim {

struct ParamGroup {
  NamedTensors params;                 // the names key the state in checkpoints; unique over all groups
  std::optional<double> lr;            // unset: the optimizer's
  std::optional<double> weight_decay;  // unset: the optimizer's
};

class Optimizer {
 public:
  virtual ~Optimizer() = default;
  Optimizer(const Optimizer&) = delete;
  Optimizer& operator=(const Optimizer&) = delete;

  // One update of every parameter that has a gradient.
  virtual void step() = 0;
  // Drops the gradients of all parameters, or with set_to_none false zeroes them in place (their memory stays: a
  // captured CUDA graph step accumulates into the same gradients at every replay).
  void zero_grad(bool set_to_none = true);

  size_t num_groups() const { return groups_.size(); }
  const NamedTensors& group_params(size_t g) const { return groups_.at(g).params; }
  double lr(size_t g) const { return groups_.at(g).lr; }
  void set_lr(size_t g, double lr);
  double initial_lr(size_t g) const { return groups_.at(g).initial_lr; }  // what schedules scale
  double weight_decay(size_t g) const { return groups_.at(g).weight_decay; }
  virtual std::string name() const = 0;

  // Optimizer state, keyed "<param name>.<field>" (SGD: momentum_buffer; Adam: exp_avg, exp_avg_sq, step).
  // Parameters that never had a gradient have no state (as in PyTorch).
  virtual NamedTensors state_dict() const = 0;
  // Replaces the state. Unknown keys throw ValueError, shape mismatches ShapeError, both naming the key.
  virtual void load_state_dict(const NamedTensors& state) = 0;
  // Bytes the state takes once every parameter has stepped (for memory plans, before any step).
  virtual int64_t planned_state_bytes() const = 0;

 protected:
  struct Group {
    NamedTensors params;
    double lr;
    double initial_lr;
    double weight_decay;
  };
  Optimizer(std::vector<ParamGroup> groups, double lr, double weight_decay, const char* who);
  std::vector<Group> groups_;
};

struct SgdOptions {
  double lr = 0.1;
  double momentum = 0;
  double dampening = 0;
  double weight_decay = 0;
  bool nesterov = false;  // needs momentum > 0 and dampening 0
};

class Sgd : public Optimizer {
 public:
  Sgd(std::vector<ParamGroup> groups, const SgdOptions& options);
  void step() override;
  std::string name() const override { return "sgd"; }
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;
  int64_t planned_state_bytes() const override;

 private:
  SgdOptions o_;
  std::map<std::string, Tensor> momentum_;  // by parameter name
};

struct AdamOptions {
  double lr = 1e-3;
  double beta1 = 0.9;
  double beta2 = 0.999;
  double eps = 1e-8;
  double weight_decay = 0;
  bool decoupled_weight_decay = false;  // AdamW: p *= 1 - lr * wd instead of g += wd * p
};
// PyTorch's AdamW defaults (weight decay 0.01, decoupled).
AdamOptions adamw_options(double lr = 1e-3, double weight_decay = 0.01);

class Adam : public Optimizer {
 public:
  Adam(std::vector<ParamGroup> groups, const AdamOptions& options);
  void step() override;
  std::string name() const override { return o_.decoupled_weight_decay ? "adamw" : "adam"; }
  NamedTensors state_dict() const override;
  void load_state_dict(const NamedTensors& state) override;
  int64_t planned_state_bytes() const override;

 private:
  struct State {
    Tensor exp_avg, exp_avg_sq;
    int64_t step = 0;
  };
  AdamOptions o_;
  std::map<std::string, State> state_;
};

// One group holding every parameter of `params`.
std::vector<ParamGroup> single_group(const NamedTensors& params);

// An optimizer as programs and strategies name it: its kind and the hyperparameters they expose.
struct OptimizerSpec {
  std::string kind = "sgd";  // sgd | adam | adamw
  double lr = 0.1;
  double momentum = 0.9;    // sgd
  bool nesterov = true;     // sgd; applies only with momentum > 0
  double weight_decay = 0;  // sgd and adam: added to the gradient; adamw: decoupled
};

// The optimizer `spec` names over one group of `params` (Adam and AdamW with PyTorch's betas and eps).
// An unknown kind throws ValueError.
std::unique_ptr<Optimizer> make_optimizer(const OptimizerSpec& spec, const NamedTensors& params);

}  // namespace optim
}  // namespace tandem
