// Autograd: define-by-run graph nodes, saved tensors with version checks, grad mode, and the backward engine.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/base/non_copyable.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace autograd {

// Grad mode is per thread: each worker thread builds and runs its own graphs.
bool grad_enabled();
void set_grad_enabled(bool on);

class NoGradGuard : NonCopyable {
 public:
  NoGradGuard() : previous_(grad_enabled()) { set_grad_enabled(false); }
  ~NoGradGuard() { set_grad_enabled(previous_); }

 private:
  bool previous_;
};

// A tensor kept for backward. Unpacking it checks that it was not modified in place since.
class SavedTensor {
 public:
  SavedTensor() = default;
  explicit SavedTensor(const Tensor& t);
  Tensor unpack(const std::string& op) const;  // throws AutogradError on a version mismatch
  bool defined() const { return tensor_.defined(); }

 private:
  Tensor tensor_;  // detached: holding the grad_fn of an output would make a cycle
  uint64_t version_ = 0;
};

// The pending gradient buffers of a node's inputs that the backward engine offers the node's backward to add
// its input gradients into in place (sparing a fresh tensor and a separate add kernel). The engine offers input
// i's buffer only when it owns it alone (a gradient some backward returned or an add of such, never a
// gradient passed to backward(), nor one held or viewed elsewhere), dense, with the input's shape, dtype and
// device, and only while inplace_accumulation() is on. A backward that added input i's gradient into offered(i)
// (result + old value, as the separate add computes it) calls accumulated(i) and returns no gradient for i.
class InPlaceGrads {
 public:
  explicit InPlaceGrads(std::vector<Tensor> offered)
      : offered_(std::move(offered)), accumulated_(offered_.size(), false) {}
  // Input i's pending gradient when offered; undefined otherwise.
  const Tensor& offered(size_t i) const;
  void accumulated(size_t i);
  bool was_accumulated(size_t i) const { return i < accumulated_.size() && accumulated_[i]; }

 private:
  std::vector<Tensor> offered_;
  std::vector<bool> accumulated_;
};

// Whether the engine offers pending buffers for in-place accumulation (default on; off computes every sum of
// gradients by a separate add, for tests that compare both).
bool inplace_accumulation();
void set_inplace_accumulation(bool on);

class Node;
struct Edge {
  std::shared_ptr<Node> fn;
  int input_nr = 0;
  bool valid() const { return fn != nullptr; }
};

struct OutputMeta {
  Shape shape;
  DType dtype;
  Device device;
};

// A function in the backward graph: maps gradients of its forward outputs to gradients of its inputs.
class Node {
 public:
  explicit Node(std::string name);
  virtual ~Node() = default;
  const std::string& name() const { return name_; }
  uint64_t sequence_nr() const { return sequence_nr_; }
  std::vector<Edge>& next_edges() { return next_edges_; }
  std::vector<OutputMeta>& outputs() { return outputs_; }
  // grads[i] is the gradient of forward output i (zeros when it received none); returns one gradient per
  // next edge (undefined where that input needs none).
  virtual std::vector<Tensor> apply(std::vector<Tensor>& grads) = 0;
  // Whether apply_into() may add gradients into the pending buffers it is offered (InPlaceGrads).
  virtual bool takes_inplace() const { return false; }
  // apply() with `into`: the input gradients it adds into buffers in place are marked there, not returned.
  virtual std::vector<Tensor> apply_into(std::vector<Tensor>& grads, InPlaceGrads&) { return apply(grads); }
  // Frees what apply() needs (saved tensors); apply() afterwards throws.
  virtual void release() {}

 private:
  std::string name_;
  uint64_t sequence_nr_;
  std::vector<Edge> next_edges_;
  std::vector<OutputMeta> outputs_;
};

// Backward function of a recorded op: (output grads, which inputs need a grad) -> input grads.
using BackwardFn = std::function<std::vector<Tensor>(std::vector<Tensor>& grads, const std::vector<bool>& needs)>;

// A BackwardFn that may add input gradients into the pending buffers `into` offers.
using BackwardIntoFn =
    std::function<std::vector<Tensor>(std::vector<Tensor>& grads, const std::vector<bool>& needs, InPlaceGrads& into)>;

// True when grad mode is on and any of `inputs` requires grad.
bool any_requires_grad(const std::vector<Tensor>& inputs);
// If any input requires grad (and grad mode is on), makes a node running `fn` the grad_fn of `outputs`.
void record(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn fn);
// record() for a backward that takes in-place accumulation.
void record_into(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                 BackwardIntoFn fn);

// Runs backward from `roots` seeded with `grads`, accumulating into the .grad of reachable leaves.
void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph = false);

// Refuses an in-place change of `t` while grad mode is on and `t` is part of a graph.
void check_inplace(const Tensor& t, const char* op);

}  // namespace autograd
}  // namespace tandem
