// Shared pieces of the cyclic-DP tests: small models, seeded micro-batches, and trainer construction.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "parallel/cyclic/trainer.h"

namespace tandem {
namespace parallel {
namespace cyclic {
namespace testing {

// ResNet-18 (CIFAR stem) of `width` channels for `channels`-channel images and 10 classes.
ModelFactory tiny_resnet(int64_t width, int64_t channels, uint64_t seed);
// conv-ReLU-conv-ReLU-pool-linear without batch norm (its gradient is a plain mean over samples).
ModelFactory plain_convnet(int64_t channels, uint64_t seed);

// Micro-batch i: normal images of `shape` and labels in [0, 10), from (seed, i).
MicroBatchFn seeded_batches(const Shape& shape, uint64_t seed);

// A tiny_resnet of `width` channels for `input`'s images and seeded_batches of `input`, from one fresh seed (the
// batches from seed + 1), and trainers of that model on those batches' shape (on `workers`, as make_trainer).
struct SeededResnet {
  explicit SeededResnet(const Shape& input, int64_t width = 4);
  CyclicTrainer trainer(const TrainerOptions& o, const std::string& workers = "") const;

  uint64_t seed;
  Shape input;
  ModelFactory factory;
  MicroBatchFn batches;
};

// A trainer on `workers`, a make_workers spec naming as many workers as the mode needs ("": that many CPU
// threads).
CyclicTrainer make_trainer(const ModelFactory& factory, const Shape& micro_input, const TrainerOptions& o,
                           const std::string& workers = "");

// Tensors of two named lists, paired by name (every name of `a` must be in `b`).
std::vector<std::pair<Tensor, Tensor>> pair_by_name(const NamedTensors& a, const NamedTensors& b);

}  // namespace testing
}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
