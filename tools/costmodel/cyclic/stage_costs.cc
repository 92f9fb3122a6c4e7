// Modelled Cyclic DP stage costs.
#include "tools/costmodel/cyclic/stage_costs.h"

#include "models/losses.h"
#include "runtime/base/error.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/stream.h"
#include "runtime/optim/optim.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/rng.h"
#include "tools/costmodel/counters.h"
#include "tools/costmodel/scaling.h"

namespace tandem {
namespace costmodel {

namespace {

// One micro-batch of `rows` through every stage and back, and every stage's update: the ops of each piece, and
// the activation bytes each stage holds between its forward and its backward.
struct Pass {
  std::vector<std::vector<OpCounts>> forward, backward, update;
  std::vector<double> stored;
};

Pass record_pass(const std::vector<std::shared_ptr<models::Sequential>>& stages, const Shape& sample, int64_t rows,
                 std::vector<std::unique_ptr<optim::Sgd>>& optimizers) {
  const size_t S = stages.size();
  const Device gpu = Device::cuda(0);
  Pass p;
  p.forward.resize(S);
  p.backward.resize(S);
  p.update.resize(S);
  p.stored.assign(S, 0);
  auto tracker = std::make_shared<MemoryTracker>("modelled stages");
  MemoryScope scope(tracker);
  Generator gen(7);
  Shape shape{rows};
  shape.insert(shape.end(), sample.begin(), sample.end());
  Tensor x = randn(shape, gen, TensorOptions().with_device(gpu));
  std::vector<Tensor> inputs, outputs;
  Tensor loss;
  for (size_t l = 0; l < S; ++l) {
    Tensor in = x.detach();
    if (l > 0) in.set_requires_grad(true);
    const int64_t before = tracker->counters().cur(MemoryCategory::Activations);
    Recording rec(true);
    Tensor out = stages[l]->forward(in);
    if (l + 1 == S) {
      const Tensor labels = from_vector<int64_t>(std::vector<int64_t>(static_cast<size_t>(rows), 0), {rows}, gpu);
      loss = models::cross_entropy(out, labels);
    }
    p.forward[l] = rec.take();
    p.stored[l] = static_cast<double>(tracker->counters().cur(MemoryCategory::Activations) - before);
    inputs.push_back(in);
    outputs.push_back(out);
    x = out;
  }
  Tensor grad;
  for (size_t l = S; l-- > 0;) {
    Recording rec(true);
    if (l + 1 == S)
      loss.backward();
    else
      outputs[l].backward(grad);
    p.backward[l] = rec.take();
    if (l > 0) grad = inputs[l].grad();
  }
  for (size_t l = 0; l < S; ++l) {
    Recording rec(true);
    optimizers[l]->step();
    p.update[l] = rec.take();
    stages[l]->zero_grad();
  }
  return p;
}

}  // namespace

ModelledStages model_stage_costs(const std::vector<std::shared_ptr<models::Sequential>>& stages, const Shape& sample,
                                 int64_t batch, const GpuSpec& gpu, const Constants& c) {
  TD_CHECK(counters_available(), "modelled stage costs: ", counters_unavailable_reason());
  TD_CHECK(!stages.empty() && batch >= 1, "modelled stage costs need stages and a micro-batch");
  DeviceGuard on_gpu(Device::cuda(0));
  const size_t S = stages.size();
  std::vector<std::unique_ptr<optim::Sgd>> optimizers;
  for (const auto& st : stages) {
    st->to(Device::cuda(0));
    st->train(true);
    optim::SgdOptions so;
    so.lr = 0.05;
    so.momentum = 0.9;
    so.weight_decay = 5e-4;
    optimizers.push_back(std::make_unique<optim::Sgd>(optim::single_group(st->named_parameters()), so));
  }
  constexpr int64_t kSmall = 2, kLarge = 4;
  {
    SkipArithmetic warm_up;  // algorithm searches, gradients and momentum buffers
    record_pass(stages, sample, kSmall, optimizers);
    record_pass(stages, sample, kLarge, optimizers);
  }
  const Pass a = record_pass(stages, sample, kSmall, optimizers), b = record_pass(stages, sample, kLarge, optimizers);
  ModelledStages m;
  parallel::cyclic::StageCosts& k = m.costs;
  const double rows = static_cast<double>(batch);
  for (size_t l = 0; l < S; ++l) {
    k.forward_s.push_back(gpu_seconds(extrapolate(a.forward[l], kSmall, b.forward[l], kLarge, rows), gpu, c));
    k.backward_s.push_back(gpu_seconds(extrapolate(a.backward[l], kSmall, b.backward[l], kLarge, rows), gpu, c));
    k.update_s.push_back(gpu_seconds(merge_by_key(b.update[l]), gpu, c));
    int64_t params = 0;
    for (const Tensor& t : stages[l]->parameters()) params += static_cast<int64_t>(t.nbytes());
    k.param_bytes.push_back(params);
    m.stored_bytes.push_back(a.stored[l] + (b.stored[l] - a.stored[l]) / (kLarge - kSmall) * (rows - kSmall));
  }
  // A stage's output for one micro-batch: what the model-parallel mode relays (f32).
  Generator gen(7);
  Shape shape{1};
  shape.insert(shape.end(), sample.begin(), sample.end());
  Tensor x = randn(shape, gen, TensorOptions().with_device(Device::cuda(0)));
  {
    SkipArithmetic no_arithmetic;
    autograd::NoGradGuard no_grad;
    for (size_t l = 0; l < S; ++l) {
      x = stages[l]->forward(x);
      k.activation_bytes.push_back(static_cast<int64_t>(x.nbytes()) * batch);
    }
  }
  k.link_bytes_per_s = c.link * gpu.nvlink_bytes_per_s;
  k.latency_s = c.launch_floor_s;
  return m;
}

}  // namespace costmodel
}  // namespace tandem
