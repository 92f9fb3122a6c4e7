// The ProxylessNAS search space for blockwise-distillation students: an MBConv supernet cell holding the six
// candidates {3x3, 5x5, 7x7} x {expansion 3, 6} (plus "zero" where the cell has an identity shortcut), one
// of which runs per step, drawn from softmax(alpha) by the cell's own seeded generator.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "models/layers.h"
#include "models/module.h"
#include "models/sequential.h"

namespace tandem {
namespace models {

// ProxylessNAS's batch norm (momentum 0.1, eps 1e-3), which Pipe-BD's supernet keeps.
inline BatchNormSpec proxyless_bn() {
  BatchNormSpec s;
  s.eps = 1e-3;
  return s;
}

struct SupernetCellSpec {
  int64_t in = 0, out = 0, stride = 1;
  bool zero_candidate = true;  // add "zero" (skip the cell) when stride is 1 and in == out
  uint64_t sample_seed = 0;    // cells seeded alike sample alike (replicas of a data-parallel group)
  BatchNormSpec bn = proxyless_bn();
};

class SupernetCell : public Module {
 public:
  SupernetCell(const SupernetCellSpec& spec, Generator& gen);
  // Training: draws a path (unless one is fixed) and runs it. Evaluation: the most likely path.
  // When alpha requires grad, the output is scaled by a gate of value 1 whose gradient is ProxylessNAS's
  // binary-gate gradient restricted to the sampled path: d loss / d alpha_k = <g, o_s> p_s (delta_sk - p_k).
  Tensor forward(const Tensor& x) override;
  Shape output_shape(const Shape& input) const override;
  std::string describe() const override;

  size_t num_candidates() const { return names_.size(); }
  const std::string& candidate_name(size_t i) const { return names_.at(i); }  // "mb3_e6", "zero"
  // The path of the latest forward (or the fixed one).
  size_t active() const { return active_; }
  // Fixes the path (nullopt: sample again in training).
  void fix_path(std::optional<size_t> path);
  // Draws a path as a training forward does (the same stream, advanced alike) without running the cell: for a
  // caller that fixes it (fix_path) and runs that forward from a CUDA graph captured for this path. A fixed path is
  // returned as it is, with no draw.
  size_t draw_path();
  // The path softmax(alpha) prefers (first of the maxima): the derived architecture.
  size_t most_likely() const;
  std::vector<double> probabilities() const;  // softmax(alpha), on the host

  Tensor alpha;  // [candidates] architecture parameters, zeros at start (uniform choice)

 private:
  size_t sample();
  bool residual_;
  std::vector<std::string> names_;
  std::vector<ModulePtr> ops_;  // nullptr for "zero"
  Generator sampler_;
  std::optional<size_t> fixed_;
  size_t active_ = 0;
  // Host copy of softmax(alpha), refreshed when alpha changes (its version counter moves).
  mutable std::vector<double> probs_;
  mutable uint64_t probs_version_ = ~0ull;
  mutable const void* probs_storage_ = nullptr;
};

// The supernet cells among `m` and its submodules, in the order of named_modules.
std::vector<SupernetCell*> supernet_cells(Module& m);

struct SupernetBlockSpec {
  int64_t cells = 2;          // cells of the body (at least those the stride needs)
  int64_t stem_channels = 0;  // for image inputs (<= 4 channels): a 3x3 conv-BN-ReLU6 stem; 0: the output width
  bool zero_candidate = true;
  uint64_t seed = 0;  // initialization and path sampling
  BatchNormSpec bn = proxyless_bn();
};

// A student block mapping `input` [N, C, H, W] to `output`: [N, C', H / s, W / s] with s a power of 2, or
// [N, K] (a head). Body: a 3x3 stem for image inputs, then supernet cells, the first ones of stride 2 until
// the spatial size matches. A head block's body ends at min(2 C, head_channels) channels at the size of the
// teacher's last feature map (`feature_shape`), then 1x1 conv to head_channels, BN, ReLU6, global average
// pool and Linear(head_channels, K). Throws ShapeError when no such block exists.
std::shared_ptr<Sequential> make_supernet_block(const Shape& input, const Shape& output, const Shape& feature_shape,
                                                const SupernetBlockSpec& spec);

}  // namespace models
}  // namespace tandem
