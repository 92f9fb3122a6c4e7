// ComputeGraphs: per-key CUDA graphs of Pipe-BD's compute instructions, with static inputs, shared gradient tensors
// and a bounded number of graphs.
#include "parallel/bd/compute_graphs.h"

#include <algorithm>

#include "models/zoo/supernet.h"
#include "runtime/base/error.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"

namespace tandem {
namespace parallel {
namespace bd {

struct ComputeGraphs::Entry {
  std::string key;
  int64_t runs = 0;
  std::unique_ptr<CudaGraph> graph;
  Tensor out;                       // teacher: the static output
  std::vector<std::string> params;  // student: the parameters its path trains (named as in named_parameters)
};

namespace {

std::string input_key(const Tensor& t) { return shape_str(t.shape()) + " " + dtype_name(t.dtype()); }

// The supernet cells of `m`, each with its path drawn and fixed; they sample again when this goes.
class DrawnPaths {
 public:
  explicit DrawnPaths(models::Module& m) : cells_(models::supernet_cells(m)) {
    for (models::SupernetCell* cell : cells_) {
      const size_t path = cell->draw_path();
      cell->fix_path(path);
      key_ += (key_.empty() ? " path " : ",") + std::to_string(path);
    }
  }
  ~DrawnPaths() {
    for (models::SupernetCell* c : cells_) c->fix_path(std::nullopt);
  }
  const std::string& key() const { return key_; }

 private:
  std::vector<models::SupernetCell*> cells_;
  std::string key_;
};

}  // namespace

ComputeGraphs::ComputeGraphs(const Stream& stream, size_t capacity) : stream_(stream), capacity_(capacity) {
  TD_CHECK_DEVICE(stream.device().is_cuda(), "--cuda-graph needs CUDA workers, got a worker on ", stream.device());
  TD_CHECK(capacity >= 1, "at least one CUDA graph must fit, got a capacity of ", capacity);
}

ComputeGraphs::~ComputeGraphs() {
  // A graph may be destroyed only once its launches have run.
  try {
    stream_.synchronize();
  } catch (...) {  // the error is the worker's to report; the graphs go anyway
  }
}

ComputeGraphs::Entry& ComputeGraphs::entry(const std::string& key) {
  std::unique_ptr<Entry>& e = entries_[key];
  if (!e) {
    e = std::make_unique<Entry>();
    e->key = key;
  }
  return *e;
}

Tensor& ComputeGraphs::static_copy(const std::string& key, const Tensor& src) {
  Tensor& s = statics_[key];
  if (!s.defined()) s = empty_like(src);
  if (s.raw_data() != src.raw_data()) s.copy_(src);
  return s;
}

void ComputeGraphs::replay(Entry& e, const std::function<void()>& step) {
  if (!e.graph) {
    if (graphs_ >= capacity_) {
      // Full: keys met later run eagerly (replacing graphs would capture again and again where keys keep changing).
      step();
      ++counts_.eager;
      return;
    }
    auto g = std::make_unique<CudaGraph>();
    try {
      g->capture(stream_, step, CaptureMode::ThreadLocal);
    } catch (const GraphCaptureError& err) {
      TD_THROW(GraphCaptureError, "--cuda-graph: capturing ", e.key, " failed: ", err.message());
    }
    e.graph = std::move(g);
    ++graphs_;
    ++counts_.captured;
  }
  e.graph->replay();
  ++counts_.replayed;
}

Tensor ComputeGraphs::teacher(int block, models::Module& teacher, const Tensor& input, bool fresh) {
  const std::string key = "teacher block " + std::to_string(block) + " on " + input_key(input);
  const Tensor& x = static_copy(key + " input", input);
  Entry& e = entry(key);
  auto forward = [&] {
    autograd::NoGradGuard no_grad;
    return teacher.forward(x);
  };
  if (e.runs++ == 0) {
    e.out = forward();  // its output becomes the static one
    ++counts_.eager;
  } else {
    replay(e, [&] { e.out.copy_(forward()); });
  }
  return fresh ? e.out.clone() : e.out;
}

void ComputeGraphs::student(int block, models::Module& student, const Tensor& input, const Tensor& target,
                            const std::string& weighting,
                            const std::function<void(const Tensor&, const Tensor&)>& body) {
  const std::string inputs = input_key(input) + " -> " + input_key(target);
  DrawnPaths paths(student);
  const std::string key = "student block " + std::to_string(block) + " on " + inputs + paths.key() + " " + weighting;
  const std::string prefix = "student block " + std::to_string(block) + " ";
  const Tensor& x = static_copy(prefix + input_key(input) + " input", input);
  const Tensor& y = static_copy(prefix + input_key(target) + " target", target);
  Entry& e = entry(key);
  NamedTensors params = student.named_parameters();
  if (e.runs++ == 0) {
    // As an eager step: no gradient before; its backward makes those of the path's parameters. Each becomes (or is
    // copied into) the parameter's one gradient tensor, which every graph of the block accumulates into.
    for (auto& [name, p] : params) p.zero_grad();
    body(x, y);
    for (auto& [name, p] : params) {
      Tensor g = p.grad();
      if (!g.defined()) continue;
      e.params.push_back(name);
      Tensor& kept = grads_[prefix + name];
      if (!kept.defined()) {
        kept = g;
      } else {
        autograd::NoGradGuard no_grad;
        kept.copy_(g);
        p.set_grad(kept);
      }
    }
    ++counts_.eager;
    return;
  }
  std::vector<Tensor> trained;
  for (auto& [name, p] : params) {
    if (std::find(e.params.begin(), e.params.end(), name) == e.params.end()) {
      p.zero_grad();
      continue;
    }
    Tensor& kept = grads_.at(prefix + name);
    p.set_grad(kept);
    trained.push_back(kept);
  }
  replay(e, [&] {
    for (Tensor& g : trained) g.fill_(0.0);
    body(x, y);
  });
}

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
