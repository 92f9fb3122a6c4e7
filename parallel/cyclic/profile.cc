// Stage profiling and cost models.
#include "parallel/cyclic/profile.h"

#include <algorithm>
#include <limits>

#include "models/losses.h"
#include "runtime/base/error.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/precision.h"
#include "runtime/tensor/rng.h"

namespace tandem {
namespace parallel {
namespace cyclic {

StageProfile profile_stages(const std::vector<std::shared_ptr<models::Sequential>>& stages, const Shape& micro_input,
                            int reps) {
  TD_CHECK(!stages.empty(), "profile_stages: no stages");
  TD_CHECK(reps >= 1, "profile_stages: reps must be >= 1");
  const size_t S = stages.size();
  StageProfile p;
  p.forward_s.assign(S, std::numeric_limits<double>::infinity());
  p.backward_s = p.forward_s;
  p.stored_bytes.assign(S, 0);
  p.forward_extra_bytes.assign(S, 0);
  p.backward_extra_bytes.assign(S, 0);
  p.param_bytes.assign(S, 0);
  p.output_bytes.assign(S, 0);
  for (size_t l = 0; l < S; ++l)
    for (const Tensor& t : stages[l]->parameters()) p.param_bytes[l] += static_cast<int64_t>(t.nbytes());

  auto tracker = std::make_shared<MemoryTracker>("profile");
  MemoryScope scope(tracker);
  Generator gen(0x9e3779b97f4a7c15ull);
  Device device = current_device();
  Stream stream = current_stream(device);
  auto now = [&] {
    stream.synchronize();
    return host_time_s();
  };
  // Rep -1 runs every shape once untimed, so that the times leave out first-call costs (on a GPU, cuDNN's algorithm
  // search per convolution shape); the memory it measures is measured again.
  for (int rep = -1; rep < reps; ++rep) {
    Tensor x = randn(micro_input, gen, TensorOptions(DType::F32).with_device(device));
    std::vector<Tensor> inputs, outputs;
    Tensor loss;
    for (size_t l = 0; l < S; ++l) {
      Tensor in = x.detach();
      if (l > 0) in.set_requires_grad(true);
      int64_t before = tracker->counters().cur(MemoryCategory::Activations);
      tracker->reset_peaks();
      double t0 = now();
      Tensor out = stages[l]->forward(in);
      if (l + 1 == S) {
        TD_CHECK(out.dim() == 2, "profile_stages: the last stage must give [batch, classes] logits, got ",
                 shape_str(out.shape()));
        Tensor labels =
            from_vector<int64_t>(std::vector<int64_t>(static_cast<size_t>(out.size(0)), 0), {out.size(0)}, device);
        loss = models::cross_entropy(out, labels);
      }
      if (rep >= 0) p.forward_s[l] = std::min(p.forward_s[l], now() - t0);
      MemoryCounters after = tracker->counters();
      p.stored_bytes[l] = after.cur(MemoryCategory::Activations) - before;
      p.forward_extra_bytes[l] = after.peak_of(MemoryCategory::Activations) - after.cur(MemoryCategory::Activations);
      p.output_bytes[l] = static_cast<int64_t>(out.nbytes());
      inputs.push_back(in);
      outputs.push_back(out);
      x = out;
    }
    Tensor grad;
    for (size_t l = S; l-- > 0;) {
      const int64_t before = tracker->counters().cur(MemoryCategory::Activations);
      tracker->reset_peaks();
      double t0 = now();
      if (l + 1 == S) {
        loss.backward();
        loss = Tensor();
      } else {
        outputs[l].backward(grad);
      }
      if (rep >= 0) p.backward_s[l] = std::min(p.backward_s[l], now() - t0);
      p.backward_extra_bytes[l] =
          std::max<int64_t>(0, tracker->counters().peak_of(MemoryCategory::Activations) - before);
      if (l > 0) grad = inputs[l].grad();
      outputs[l] = Tensor();
      inputs[l] = Tensor();
    }
    for (const auto& st : stages) st->zero_grad();
  }
  return p;
}

StageCosts costs_from_profile(const StageProfile& p, double link_bytes_per_s, double latency_s) {
  StageCosts c;
  c.forward_s = p.forward_s;
  c.backward_s = p.backward_s;
  c.update_s.assign(p.forward_s.size(), 0.0);
  c.param_bytes = p.param_bytes;
  c.activation_bytes = p.output_bytes;
  c.link_bytes_per_s = link_bytes_per_s;
  c.latency_s = latency_s;
  return c;
}

StageCosts flop_costs(const std::vector<Unit>& units, const std::vector<size_t>& starts, int64_t batch) {
  const int S = static_cast<int>(starts.size());
  StageCosts c = StageCosts::unit(S);
  std::vector<double> flops(S, 0);
  double total = 0;
  for (int l = 0; l < S; ++l) {
    size_t end = l + 1 < S ? starts[l + 1] : units.size();
    for (size_t i = starts[l]; i < end; ++i) {
      flops[l] += units[i].flops;
      for (const Tensor& t : units[i].module->parameters()) c.param_bytes[l] += static_cast<int64_t>(t.nbytes());
    }
    c.activation_bytes[l] =
        shape_numel(units[end - 1].output) * batch * static_cast<int64_t>(dtype_size(activation_dtype(DType::F32)));
    total += flops[l];
  }
  for (int l = 0; l < S; ++l) {
    // Floors keep every cost positive (a stage of parameter-free reshapes still takes a little time).
    double f = total > 0 ? std::max(flops[l] / total * S, 1e-3) : 1.0;
    c.forward_s[l] = f;
    c.backward_s[l] = f;
  }
  return c;
}

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
