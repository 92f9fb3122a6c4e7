// The autograd graph: recording ops, saved-tensor version checks, leaf accumulation and the backward engine.
#include "runtime/tensor/autograd.h"

#include <atomic>
#include <map>
#include <queue>
#include <unordered_map>
#include <unordered_set>

#include "runtime/base/error.h"
#include "runtime/tensor/layout.h"
#include "runtime/tensor/ops.h"

namespace tandem {
namespace autograd {

namespace {
thread_local bool tl_grad_enabled = true;
std::atomic<uint64_t> next_sequence_nr{0};

// A node built from a BackwardFn closure.
class FunctionNode : public Node {
 public:
  FunctionNode(std::string name, BackwardFn fn, std::vector<bool> needs)
      : Node(std::move(name)), fn_(std::move(fn)), needs_(std::move(needs)) {}
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    TD_CHECK_T(AutogradError, fn_ != nullptr, "backward through the graph of '", name(),
               "' a second time: its saved tensors were freed by the first backward "
               "(pass retain_graph = true to the first one)");
    return fn_(grads, needs_);
  }
  void release() override { fn_ = nullptr; }

 private:
  BackwardFn fn_;
  std::vector<bool> needs_;
};

// The node of a leaf that requires grad: adds incoming gradients into its .grad.
class AccumulateGrad : public Node {
 public:
  explicit AccumulateGrad(std::shared_ptr<TensorImpl> leaf) : Node("AccumulateGrad"), leaf_(std::move(leaf)) {}
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    Tensor g = grads[0];
    Tensor leaf(leaf_);
    TD_CHECK_SHAPE(g.shape() == leaf.shape(), "gradient of shape ", shape_str(g.shape()), " for a leaf of shape ",
                   shape_str(leaf.shape()));
    Tensor current = leaf.grad();
    if (!current.defined()) {
      // Keep the incoming buffer when nothing else holds it and it has the leaf's layout, else copy it into that
      // layout (PyTorch's contract: a dense leaf's gradient has the leaf's strides, so that the optimizer reads
      // both as flat arrays); then charge it to gradients.
      const bool leaf_layout = is_dense(leaf) ? same_layout(g, leaf) : g.is_contiguous();
      Tensor stored;
      if (g.impl_ptr().use_count() <= 2 && leaf_layout && g.storage().use_count() == 1) {
        stored = g.detach();
      } else {
        stored = empty_like(leaf, g.options());
        stored.copy_(g);
      }
      stored.storage().set_category(MemoryCategory::Gradients);
      leaf.set_grad(stored);
    } else {
      add_(current, g);
    }
    return {};
  }

 private:
  std::shared_ptr<TensorImpl> leaf_;
};

std::shared_ptr<Node> grad_accumulator(const Tensor& leaf) {
  std::shared_ptr<Node> node = leaf.grad_accumulator();
  if (!node) {
    node = std::make_shared<AccumulateGrad>(leaf.impl_ptr());
    node->outputs().push_back({leaf.shape(), leaf.dtype(), leaf.device()});
    Tensor(leaf).set_grad_accumulator(node);
  }
  return node;
}

Edge edge_of(const Tensor& t) {
  if (!t.defined() || !t.requires_grad()) return Edge{};
  if (t.grad_fn()) return Edge{t.grad_fn(), t.output_nr()};
  return Edge{grad_accumulator(t), 0};
}
}  // namespace

bool grad_enabled() { return tl_grad_enabled; }
void set_grad_enabled(bool on) { tl_grad_enabled = on; }

Node::Node(std::string name) : name_(std::move(name)), sequence_nr_(next_sequence_nr.fetch_add(1)) {}

SavedTensor::SavedTensor(const Tensor& t) {
  if (!t.defined()) return;
  tensor_ = t.detach();
  version_ = t.version();
}

Tensor SavedTensor::unpack(const std::string& op) const {
  if (!tensor_.defined()) return tensor_;
  TD_CHECK_T(AutogradError, tensor_.version() == version_, "a tensor of shape ", shape_str(tensor_.shape()),
             " saved by '", op, "' for backward was modified in place afterwards (version ", tensor_.version(),
             ", saved at version ", version_, "); compute on a clone() or make the change before the op");
  return tensor_;
}

bool any_requires_grad(const std::vector<Tensor>& inputs) {
  if (!tl_grad_enabled) return false;
  for (const Tensor& t : inputs)
    if (t.defined() && t.requires_grad()) return true;
  return false;
}

void record(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn fn) {
  if (!any_requires_grad(inputs)) return;
  std::vector<bool> needs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) needs[i] = inputs[i].defined() && inputs[i].requires_grad();
  auto node = std::make_shared<FunctionNode>(name, std::move(fn), needs);
  for (const Tensor& t : inputs) node->next_edges().push_back(edge_of(t));
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor o = outputs[i];  // a handle: autograd's fields are the shared tensor's
    node->outputs().push_back({o.shape(), o.dtype(), o.device()});
    if (!is_compute_float(o.dtype())) continue;  // integer outputs (indices) carry no gradient
    o.set_grad_fn(node, static_cast<int>(i));
  }
}

void check_inplace(const Tensor& t, const char* op) {
  if (!tl_grad_enabled || !t.requires_grad()) return;
  if (t.is_leaf())
    TD_THROW(AutogradError, op, " on a leaf tensor that requires grad (shape ", shape_str(t.shape()),
             "): wrap the update in autograd::NoGradGuard");
  TD_THROW(AutogradError, op, " on a tensor that is part of the autograd graph (output of '", t.grad_fn()->name(),
           "'): in-place changes are not differentiable; use the out-of-place op");
}

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  TD_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(), " gradients");
  NoGradGuard no_grad;  // gradients are computed without recording a graph

  // Seed the roots.
  std::unordered_map<Node*, std::vector<Tensor>> buffers;
  std::vector<std::shared_ptr<Node>> starts;
  auto accumulate = [&](const std::shared_ptr<Node>& fn, int nr, const Tensor& g) {
    auto& buf = buffers[fn.get()];
    if (buf.empty()) buf.resize(fn->outputs().size());
    if (!buf[nr].defined())
      buf[nr] = g;
    else
      buf[nr] = add(buf[nr], g);
  };
  for (size_t i = 0; i < roots.size(); ++i) {
    const Tensor& r = roots[i];
    TD_CHECK_T(AutogradError, r.defined() && r.requires_grad(),
               "backward on a tensor that does not require grad (no input of its computation requires grad)");
    Tensor g = grads[i];
    if (!g.defined()) {
      TD_CHECK_T(AutogradError, r.numel() == 1, "backward without a gradient needs a scalar, got shape ",
                 shape_str(r.shape()), "; pass a gradient of the same shape");
      g = ones_like(r);
    } else {
      TD_CHECK_SHAPE(g.shape() == r.shape(), "backward: gradient of shape ", shape_str(g.shape()),
                     " for a tensor of shape ", shape_str(r.shape()));
      TD_CHECK_DEVICE(g.device() == r.device(), "backward: gradient on ", g.device(), ", tensor on ", r.device());
    }
    Edge e = edge_of(r);
    accumulate(e.fn, e.input_nr, g);
    starts.push_back(e.fn);
  }

  // Count, for every reachable node, how many edges point at it.
  std::unordered_map<Node*, int> deps;
  std::vector<Node*> stack;
  std::unordered_set<Node*> seen;
  for (auto& s : starts)
    if (seen.insert(s.get()).second) stack.push_back(s.get());
  while (!stack.empty()) {
    Node* n = stack.back();
    stack.pop_back();
    for (Edge& e : n->next_edges()) {
      if (!e.valid()) continue;
      ++deps[e.fn.get()];
      if (seen.insert(e.fn.get()).second) stack.push_back(e.fn.get());
    }
  }

  // Run nodes whose inputs are complete, latest-created first (a deterministic order).
  auto later = [](const std::shared_ptr<Node>& a, const std::shared_ptr<Node>& b) {
    return a->sequence_nr() < b->sequence_nr();
  };
  std::priority_queue<std::shared_ptr<Node>, std::vector<std::shared_ptr<Node>>, decltype(later)> ready(later);
  std::unordered_set<Node*> queued;
  for (auto& s : starts)
    if (deps[s.get()] == 0 && queued.insert(s.get()).second) ready.push(s);

  // A node whose last input edge is done: run it if it received a gradient; else skip it, which
  // completes the edges it would have fed.
  std::vector<std::shared_ptr<Node>> done;
  auto complete_edge = [&](const std::shared_ptr<Node>& fn) {
    if (--deps[fn.get()] != 0) return;
    if (buffers.count(fn.get())) {
      if (queued.insert(fn.get()).second) ready.push(fn);
    } else {
      done.push_back(fn);
    }
  };
  auto drain_skipped = [&] {
    while (!done.empty()) {
      std::shared_ptr<Node> n = done.back();
      done.pop_back();
      for (Edge& e : n->next_edges())
        if (e.valid()) complete_edge(e.fn);
    }
  };

  while (!ready.empty()) {
    std::shared_ptr<Node> node = ready.top();
    ready.pop();
    std::vector<Tensor> in = std::move(buffers[node.get()]);
    buffers.erase(node.get());
    in.resize(node->outputs().size());
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].defined()) {
        const OutputMeta& m = node->outputs()[i];
        in[i] = zeros(m.shape, TensorOptions(m.dtype).with_device(m.device));
      }
    }
    std::vector<Tensor> out = node->apply(in);
    if (!retain_graph) node->release();
    auto& edges = node->next_edges();
    TD_ASSERT(out.empty() || out.size() == edges.size(), "'", node->name(), "' returned ", out.size(),
              " gradients for ", edges.size(), " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      Edge& e = edges[i];
      if (!e.valid()) continue;
      if (i < out.size() && out[i].defined()) accumulate(e.fn, e.input_nr, out[i]);
      complete_edge(e.fn);
    }
    drain_skipped();
  }
}

}  // namespace autograd
}  // namespace tandem
