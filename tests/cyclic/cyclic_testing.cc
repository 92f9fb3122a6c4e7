// Shared pieces of the cyclic-DP tests.
#include "tests/cyclic/cyclic_testing.h"

#include <map>

#include "models/layers.h"
#include "models/registry.h"
#include "runtime/base/error.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace cyclic {
namespace testing {

ModelFactory tiny_resnet(int64_t width, int64_t channels, uint64_t seed) {
  return [=] {
    models::ModelOptions o;
    o.cifar = true;
    o.width = width;
    o.in_channels = channels;
    o.num_classes = 10;
    o.seed = seed;
    return std::static_pointer_cast<models::Sequential>(models::make_model("resnet18", o));
  };
}

ModelFactory plain_convnet(int64_t channels, uint64_t seed) {
  return [=] {
    Generator gen(seed);
    auto m = std::make_shared<models::Sequential>();
    models::Conv2dSpec c1;
    c1.in_channels = channels;
    c1.out_channels = 6;
    c1.kernel = 3;
    c1.padding = 1;
    c1.bias = true;
    models::Conv2dSpec c2 = c1;
    c2.in_channels = 6;
    c2.out_channels = 8;
    c2.stride = 2;
    m->add("conv1", std::make_shared<models::Conv2d>(c1, gen));
    m->add("relu1", std::make_shared<models::ReLU>());
    m->add("conv2", std::make_shared<models::Conv2d>(c2, gen));
    m->add("relu2", std::make_shared<models::ReLU>());
    m->add("pool", std::make_shared<models::GlobalAvgPool>());
    m->add("fc", std::make_shared<models::Linear>(8, 10, true, gen));
    return m;
  };
}

MicroBatchFn seeded_batches(const Shape& shape, uint64_t seed) {
  return [=](int64_t index) {
    Generator gen(seed, static_cast<uint64_t>(index) << 32);
    MicroBatch b;
    b.images = randn(shape, gen);
    std::vector<int64_t> labels(static_cast<size_t>(shape[0]));
    for (auto& l : labels) l = static_cast<int64_t>(gen.integer(10));
    b.labels = from_vector<int64_t>(labels, {shape[0]});
    return b;
  };
}

CyclicTrainer make_trainer(const ModelFactory& factory, const Shape& micro_input, const TrainerOptions& o,
                           const std::string& workers) {
  int n = workers_needed(o.mode, o.micro_batches, o.stages);
  return CyclicTrainer(factory, micro_input, o, make_workers(workers.empty() ? "cpu:" + std::to_string(n) : workers));
}

SeededResnet::SeededResnet(const Shape& input_shape, int64_t width)
    : seed(tandem::testing::fresh_seed()),
      input(input_shape),
      factory(tiny_resnet(width, input_shape[1], seed)),
      batches(seeded_batches(input_shape, seed + 1)) {}

CyclicTrainer SeededResnet::trainer(const TrainerOptions& o, const std::string& workers) const {
  return make_trainer(factory, input, o, workers);
}

std::vector<std::pair<Tensor, Tensor>> pair_by_name(const NamedTensors& a, const NamedTensors& b) {
  std::map<std::string, Tensor> bm(b.begin(), b.end());
  std::vector<std::pair<Tensor, Tensor>> out;
  for (const auto& kv : a) {
    auto it = bm.find(kv.first);
    TD_CHECK(it != bm.end(), "pair_by_name: '", kv.first, "' is missing");
    out.push_back({kv.second, it->second});
  }
  return out;
}

}  // namespace testing
}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
