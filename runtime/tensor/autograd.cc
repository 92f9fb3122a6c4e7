// The autograd graph: recording ops, saved-tensor version checks, leaf accumulation and the backward engine.
#include "runtime/tensor/autograd.h"

#include <atomic>
#include <map>
#include <queue>
#include <set>
#include <unordered_map>
#include <unordered_set>

#include "runtime/base/error.h"
#include "runtime/tensor/layout.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/profiler.h"

namespace tandem {
namespace autograd {

namespace {
thread_local bool tl_grad_enabled = true;
std::atomic<bool> g_inplace_accumulation{true};
std::atomic<uint64_t> next_sequence_nr{0};

// A node built from a BackwardFn (or BackwardIntoFn) closure.
class FunctionNode : public Node {
 public:
  FunctionNode(std::string name, BackwardIntoFn fn, std::vector<bool> needs, bool takes_inplace)
      : Node(std::move(name)), fn_(std::move(fn)), needs_(std::move(needs)), takes_inplace_(takes_inplace) {}
  std::vector<Tensor> apply(std::vector<Tensor>& grads) override {
    InPlaceGrads none({});
    return apply_into(grads, none);
  }
  bool takes_inplace() const override { return takes_inplace_; }
  std::vector<Tensor> apply_into(std::vector<Tensor>& grads, InPlaceGrads& into) override {
    TD_CHECK_T(AutogradError, fn_ != nullptr, "backward through the graph of '", name(),
               "' a second time: its saved tensors were freed by the first backward "
               "(pass retain_graph = true to the first one)");
    return fn_(grads, needs_, into);
  }
  void release() override { fn_ = nullptr; }

 private:
  BackwardIntoFn fn_;
  std::vector<bool> needs_;
  bool takes_inplace_;
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
bool inplace_accumulation() { return g_inplace_accumulation.load(std::memory_order_relaxed); }
void set_inplace_accumulation(bool on) { g_inplace_accumulation.store(on, std::memory_order_relaxed); }

const Tensor& InPlaceGrads::offered(size_t i) const {
  static const Tensor none;
  return i < offered_.size() ? offered_[i] : none;
}

void InPlaceGrads::accumulated(size_t i) {
  TD_ASSERT(offered(i).defined(), "a gradient accumulated into input ", i, ", which was offered no buffer");
  accumulated_[i] = true;
  offered_[i].storage().bump_version();
}

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

namespace {
void record_node(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                 BackwardIntoFn fn, bool takes_inplace) {
  if (!any_requires_grad(inputs)) return;
  std::vector<bool> needs(inputs.size());
  for (size_t i = 0; i < inputs.size(); ++i) needs[i] = inputs[i].defined() && inputs[i].requires_grad();
  auto node = std::make_shared<FunctionNode>(name, std::move(fn), needs, takes_inplace);
  for (const Tensor& t : inputs) node->next_edges().push_back(edge_of(t));
  for (size_t i = 0; i < outputs.size(); ++i) {
    Tensor o = outputs[i];  // a handle: autograd's fields are the shared tensor's
    node->outputs().push_back({o.shape(), o.dtype(), o.device()});
    if (!carries_grad(o.dtype())) continue;  // integer outputs (indices) carry no gradient
    o.set_grad_fn(node, static_cast<int>(i));
  }
}
}  // namespace

void record(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
            BackwardFn fn) {
  if (!any_requires_grad(inputs)) return;
  BackwardIntoFn into = [fn = std::move(fn)](std::vector<Tensor>& grads, const std::vector<bool>& needs,
                                             InPlaceGrads&) { return fn(grads, needs); };
  record_node(name, inputs, outputs, std::move(into), false);
}

void record_into(const std::string& name, const std::vector<Tensor>& inputs, const std::vector<Tensor>& outputs,
                 BackwardIntoFn fn) {
  record_node(name, inputs, outputs, std::move(fn), true);
}

void check_inplace(const Tensor& t, const char* op) {
  if (!tl_grad_enabled || !t.requires_grad()) return;
  if (t.is_leaf())
    TD_THROW(AutogradError, op, " on a leaf tensor that requires grad (shape ", shape_str(t.shape()),
             "): wrap the update in autograd::NoGradGuard");
  TD_THROW(AutogradError, op, " on a tensor that is part of the autograd graph (output of '", t.grad_fn()->name(),
           "'): in-place changes are not differentiable; use the out-of-place op");
}

namespace {
// The gradients pending for each node's outputs, summed as they arrive. A buffer is the engine's own when a
// backward returned it (or an add made it); a gradient passed to backward() is the caller's.
class PendingGrads {
 public:
  void add(const std::shared_ptr<Node>& fn, int nr, const Tensor& g, bool owned) {
    Slot& s = slots_[fn.get()];
    if (s.grads.empty()) {
      s.grads.resize(fn->outputs().size());
      s.owned.resize(fn->outputs().size(), false);
    }
    if (!s.grads[nr].defined()) {
      s.grads[nr] = g;
      s.owned[nr] = owned;
    } else {
      s.grads[nr] = tandem::add(s.grads[nr], g);
      s.owned[nr] = true;
    }
  }
  bool has(Node* n) const { return slots_.count(n) != 0; }
  std::vector<Tensor> take(Node* n) {
    auto it = slots_.find(n);
    if (it == slots_.end()) return {};
    std::vector<Tensor> grads = std::move(it->second.grads);
    slots_.erase(it);
    return grads;
  }
  // The buffers of a node's inputs it may add into in place (InPlaceGrads): each the engine's own, held and
  // viewed nowhere else, dense, with the input's shape, dtype and device; each offered to one edge at most.
  std::vector<Tensor> offers(Node& node) const {
    std::vector<Tensor> out(node.next_edges().size());
    std::set<std::pair<Node*, int>> offered;
    for (size_t i = 0; i < out.size(); ++i) {
      const Edge& e = node.next_edges()[i];
      if (!e.valid()) continue;
      auto it = slots_.find(e.fn.get());
      if (it == slots_.end() || !it->second.owned[e.input_nr]) continue;
      const Tensor& t = it->second.grads[e.input_nr];
      const OutputMeta& m = e.fn->outputs()[e.input_nr];
      if (!t.defined() || t.impl_ptr().use_count() != 1 || t.storage().use_count() != 1 || !is_dense(t) ||
          t.shape() != m.shape || t.dtype() != m.dtype || t.device() != m.device)
        continue;
      if (offered.insert({e.fn.get(), e.input_nr}).second) out[i] = t;
    }
    return out;
  }

 private:
  struct Slot {
    std::vector<Tensor> grads;
    std::vector<bool> owned;
  };
  std::unordered_map<Node*, Slot> slots_;
};

// Runs a node's backward, offering it its inputs' pending buffers when it takes them. A gradient it added into
// a buffer comes back undefined, so the engine adds nothing more.
std::vector<Tensor> run_node(Node& node, std::vector<Tensor>& in, const PendingGrads& pending) {
  ProfileScope scope(node.name().c_str(), " backward");
  if (!node.takes_inplace() || !inplace_accumulation()) return node.apply(in);
  InPlaceGrads into(pending.offers(node));
  std::vector<Tensor> out = node.apply_into(in, into);
  for (size_t i = 0; i < out.size(); ++i)
    TD_ASSERT(!into.was_accumulated(i) || !out[i].defined(), "'", node.name(),
              "' both accumulated and returned the gradient of input ", i);
  return out;
}
}  // namespace

void backward(const std::vector<Tensor>& roots, const std::vector<Tensor>& grads, bool retain_graph) {
  TD_CHECK(roots.size() == grads.size(), "backward: ", roots.size(), " roots but ", grads.size(), " gradients");
  NoGradGuard no_grad;  // gradients are computed without recording a graph

  // Seed the roots.
  PendingGrads pending;
  std::vector<std::shared_ptr<Node>> starts;
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
    pending.add(e.fn, e.input_nr, g, false);
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
    if (pending.has(fn.get())) {
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
    std::vector<Tensor> in = pending.take(node.get());
    in.resize(node->outputs().size());
    for (size_t i = 0; i < in.size(); ++i) {
      if (!in[i].defined()) {
        const OutputMeta& m = node->outputs()[i];
        in[i] = zeros(m.shape, TensorOptions(m.dtype).with_device(m.device));
      }
    }
    std::vector<Tensor> out = run_node(*node, in, pending);
    if (!retain_graph) node->release();
    auto& edges = node->next_edges();
    TD_ASSERT(out.empty() || out.size() == edges.size(), "'", node->name(), "' returned ", out.size(),
              " gradients for ", edges.size(), " inputs");
    for (size_t i = 0; i < edges.size(); ++i) {
      Edge& e = edges[i];
      if (!e.valid()) continue;
      if (i < out.size() && out[i].defined()) pending.add(e.fn, e.input_nr, out[i], true);
      complete_edge(e.fn);
    }
    drain_skipped();
  }
}

}  // namespace autograd
}  // namespace tandem
