// --cuda-graph for Pipe-BD's workers: each compute instruction (a teacher block's forward, a student block's forward,
// loss and backward) replayed from a CUDA graph captured for it, while the executor keeps ordering the lanes, the
// messages and the optimizer steps from the host as it does eagerly.
//
// A graph is kept per key: the block, the input's shape and, for students, the path each supernet cell draws (drawn
// on the host before the step, as the eager forward would, and fixed for it) and the caller's loss weighting. The
// first instruction of a key runs eagerly on the static inputs, so that what it keeps (gradients, the teacher's
// static output) exists; the second is captured and replayed; later ones are replayed. Inputs are copied into static
// tensors before each replay (the copy is skipped when the input is that tensor). Captures are thread-local (CUDA's
// cudaStreamCaptureModeThreadLocal), so that the other workers and this worker's comm lane go on meanwhile.
//
// Gradients: an eager step drops every gradient first and its backward makes those of the parameters its path uses,
// so the all-reduce and the optimizer step see that set alone. A replay keeps that: before it, the path's
// parameters get back the gradient tensors the graph was captured with (one per parameter, shared by every path's
// graph) and the others none; the graph zeroes the path's gradients and accumulates into them.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "models/module.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
class CudaGraph;
namespace parallel {
namespace bd {

struct GraphCounts {
  int64_t eager = 0;     // instructions run eagerly (the first of each key, and those of keys beyond the capacity)
  int64_t captured = 0;  // graphs captured
  int64_t replayed = 0;  // instructions replayed from a graph
};

class ComputeGraphs {
 public:
  // Graphs on `stream` (the worker's compute stream), at most `capacity`: keys met once that many graphs exist run
  // eagerly every time (a supernet of many paths per block has more keys than that).
  explicit ComputeGraphs(const Stream& stream, size_t capacity = kDefaultCapacity);
  ~ComputeGraphs();

  static constexpr size_t kDefaultCapacity = 64;

  // Teacher block `block`'s forward on `input`, without gradient. The result is the graph's static output, which
  // the next replay of this key overwrites; with `fresh` it is a copy that no replay writes (for a reader on another
  // stream, e.g. a relay's send).
  Tensor teacher(int block, models::Module& teacher, const Tensor& input, bool fresh);

  // A student step of block `block`: the paths are drawn and fixed, the gradients prepared, and `body(x, target)`
  // (forward, loss, backward, and the loss accumulated in place into a tensor made before) run on static copies
  // of `input` and `target`, eagerly, captured or replayed. `weighting` tells apart steps whose body differs
  // otherwise (e.g. the loss's scale).
  void student(int block, models::Module& student, const Tensor& input, const Tensor& target,
               const std::string& weighting, const std::function<void(const Tensor&, const Tensor&)>& body);

  const GraphCounts& counts() const { return counts_; }

 private:
  struct Entry;
  Entry& entry(const std::string& key);
  // Runs `step` from `e`'s graph, captured first when there is none; eagerly when capacity_ graphs exist.
  void replay(Entry& e, const std::function<void()>& step);
  Tensor& static_copy(const std::string& key, const Tensor& src);

  Stream stream_;
  size_t capacity_;
  std::map<std::string, std::unique_ptr<Entry>> entries_;
  size_t graphs_ = 0;
  std::map<std::string, Tensor> statics_;  // static inputs, per block, role and shape
  std::map<std::string, Tensor> grads_;    // per block and parameter: the gradient the graphs accumulate into
  GraphCounts counts_;
};

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
