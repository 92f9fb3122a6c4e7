// Module: the base of layers and models. Named parameters, buffers and children in registration order,
// train/eval, and state dicts with PyTorch's key names and order.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "runtime/base/non_copyable.h"
#include "runtime/formats/safetensors.h"
#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace models {

// Weights are trained by the weight optimizer; architecture parameters (a supernet's α) by their own.
enum class ParamKind { Weight, Architecture };

class Module;
using ModulePtr = std::shared_ptr<Module>;
using NamedModules = std::vector<std::pair<std::string, ModulePtr>>;

class Module : NonCopyable {
 public:
  explicit Module(std::string type_name) : type_name_(std::move(type_name)) {}
  virtual ~Module() = default;

  virtual Tensor forward(const Tensor& x) = 0;
  Tensor operator()(const Tensor& x) { return forward(x); }
  // The output shape for an input of shape `input`, without running anything. Throws ShapeError when the
  // input does not fit (wrong rank or channel count, spatial size too small).
  virtual Shape output_shape(const Shape& input) const = 0;
  // Multiply-accumulates of one forward on `input` (a sample: batch 1), for cost models such as Cyclic DP's
  // stage balancing: convolutions and linear layers count theirs (bias included), batch norm and pooling one
  // per input element, activations, additions and reshapes nothing. A composite sums its children's; this
  // default runs them as a chain in registration order (no children: 0).
  virtual double flops(const Shape& input) const { return chain_flops(input, nullptr); }
  // Whether a partitioner may cut between this module's children, each a unit of its own: a plain chain of
  // layers grouped for naming (torchvision's layer1..layer4). Whole models and blocks stay one unit.
  virtual bool splits_into_units() const { return false; }
  // "Conv2d(3, 64, kernel 7, stride 2)" and the like, for errors and printing.
  virtual std::string describe() const { return type_name_; }
  const std::string& type_name() const { return type_name_; }

  // Recursive traversals in registration order; names are dotted paths ("layer1.0.conv1.weight").
  NamedTensors named_parameters() const;
  NamedTensors named_parameters(ParamKind kind) const;
  std::vector<Tensor> parameters() const;
  std::vector<Tensor> parameters(ParamKind kind) const;
  NamedTensors named_buffers() const;
  const NamedModules& named_children() const { return children_; }
  // This module (named "") and all its descendants, depth first.
  std::vector<std::pair<std::string, Module*>> named_modules();
  int64_t num_parameters() const;

  // Parameters then buffers of each module, then its children: PyTorch's state_dict order and names.
  NamedTensors state_dict() const;
  // Copies `state` into the parameters and buffers (converting dtype and device). With `strict`, missing
  // and unexpected keys throw ValueError listing them; a shape mismatch throws ShapeError naming the key.
  void load_state_dict(const NamedTensors& state, bool strict = true);

  // Generator states ([seed, offset] as i64) of modules that draw random numbers while training (dropout,
  // supernet path sampling): not part of state_dict() (torchvision has no such keys), but saved in
  // training checkpoints so that a resumed run draws the same numbers.
  NamedTensors rng_state() const;
  void load_rng_state(const NamedTensors& state);  // ValueError for an unknown or malformed key

  virtual void train(bool on = true);  // recursive
  void eval() { train(false); }
  bool is_training() const { return training_; }

  void zero_grad();  // drops the gradients (the optimizer then skips those parameters)
  // Moves parameters and buffers to `device`, or converts the floating ones to `dtype` (new tensors:
  // build optimizers afterwards).
  void to(Device device);
  void to(DType dtype);
  // Gives the 4-D parameters and buffers (convolution weights) channels-last strides (to_channels_last), so that
  // convolutions on channels-last inputs read them without a copy and their gradients and optimizer state keep
  // that layout. Build optimizers afterwards.
  void to_channels_last();

 protected:
  // Registers a member tensor. The module keeps a pointer to it: members must outlive the registration
  // (they do: modules are not copyable or movable).
  void register_parameter(const std::string& name, Tensor* member, ParamKind kind = ParamKind::Weight);
  void register_buffer(const std::string& name, Tensor* member);
  void register_generator(const std::string& name, Generator* member);
  template <typename M>
  std::shared_ptr<M> register_module(const std::string& name, std::shared_ptr<M> child) {
    add_child(name, child);
    return child;
  }
  void add_child(const std::string& name, ModulePtr child);
  // Sets this module's own mode flag without touching its children (a wrapper adopting its items' mode).
  void set_own_training_flag(bool on) { training_ = on; }
  // The children's FLOPs in registration order, each on its predecessor's output starting from `input`, except
  // `branch` (when given), which takes `input` itself and leaves the chain alone: a residual block's shortcut.
  double chain_flops(const Shape& input, const Module* branch) const;
  // Called after load_state_dict changed this module's buffers (host mirrors refresh here).
  virtual void on_state_loaded() {}
  // Writes into this module's buffers what it counts on the host, so that a step need not write the device each
  // time (BatchNorm2d's num_batches_tracked). Called before its buffers are read: named_buffers(), state_dict(),
  // load_state_dict() and to().
  virtual void write_host_state() const {}

 private:
  struct ParamSlot {
    std::string name;
    Tensor* tensor;
    ParamKind kind;
  };
  struct BufferSlot {
    std::string name;
    Tensor* tensor;
  };
  struct GeneratorSlot {
    std::string name;
    Generator* generator;
  };
  void check_new_name(const std::string& name) const;
  // Calls fn(path, module) for this module (path `prefix`) and its descendants, depth first.
  void visit(const std::string& prefix, const std::function<void(const std::string&, const Module&)>& fn) const;
  // Parameters then buffers of each module (state_dict order), and generators, with their paths.
  std::vector<std::pair<std::string, Tensor*>> state_slots() const;
  std::vector<std::pair<std::string, Generator*>> generator_slots() const;
  void notify_loaded();
  // Replaces each parameter and buffer by convert(it) (kept when convert returns it unchanged).
  void replace_state(const std::function<Tensor(const Tensor&)>& convert);

  std::string type_name_;
  bool training_ = true;
  std::vector<ParamSlot> params_;
  std::vector<BufferSlot> buffers_;
  std::vector<GeneratorSlot> generators_;
  NamedModules children_;
};

// A new tensor charged to the Parameters memory category (parameters and buffers alike).
Tensor parameter_tensor(const Shape& shape, DType dtype = DType::F32);

}  // namespace models
}  // namespace tandem
