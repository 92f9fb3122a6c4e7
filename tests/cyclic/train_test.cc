// A short Fashion-MNIST training per rule (and per mode for CDP-v2) on CPU workers: a few rounds on a shard
// of the data must lower the loss on test images.
#include <gtest/gtest.h>

#include <cmath>
#include <iostream>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/transforms.h"
#include "models/losses.h"
#include "parallel/cyclic/trainer.h"
#include "runtime/tensor/autograd.h"
#include "tests/cyclic/cyclic_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace cyclic {
namespace {

struct Case {
  Rule rule;
  Mode mode;
};

class FashionTest : public ::testing::TestWithParam<Case> {};

// Mean cross-entropy of the model with `state` on the first 256 test images, normalized with their own batch
// statistics (the running statistics are far from settled after a few rounds).
double test_loss(const ModelFactory& factory, const NamedTensors& state) {
  data::LoaderOptions lo;
  lo.batch_size = 256;
  lo.shuffle = false;
  lo.num_workers = 0;
  data::Loader loader(data::open_dataset("fashion-mnist", false), data::Pipeline::parse("normalize:fashion-mnist"), lo);
  auto b = loader.next();
  auto model = factory();
  model->load_state_dict(state);
  autograd::NoGradGuard no_grad;
  return models::cross_entropy(model->forward(b->images), b->labels).item<float>();
}

TEST_P(FashionTest, AFewRoundsLowerTheTestLoss) {
  const Case c = GetParam();
  // Fixed seeds: a smoke test of learning must not depend on a lucky draw (the bitwise tests use fresh ones).
  const uint64_t seed = 7;
  data::LoaderOptions lo;
  lo.batch_size = 16;
  lo.seed = seed;
  lo.num_workers = 1;
  lo.num_shards = 100;  // 600 of the 60000 images
  data::Loader loader(data::open_dataset("fashion-mnist", true), data::Pipeline::parse("normalize:fashion-mnist"), lo);
  TrainerOptions o;
  o.rule = c.rule;
  o.mode = c.mode;
  o.micro_batches = 2;
  o.stages = 2;
  o.lr = 0.05;
  ModelFactory factory = testing::tiny_resnet(4, 1, seed);
  CyclicTrainer trainer = testing::make_trainer(factory, {16, 1, 28, 28}, o);
  const double before = test_loss(factory, trainer.model_state());
  auto next = [&](int64_t) {
    auto b = loader.next();
    if (!b) b = loader.next();  // a new epoch
    return MicroBatch{b->images, b->labels};
  };
  int64_t rounds = 0;
  for (int chunk = 0; chunk < 5; ++chunk)
    for (const RoundStats& s : trainer.train(4, next)) {
      EXPECT_EQ(s.samples, 32);
      EXPECT_TRUE(std::isfinite(s.loss));
      ++rounds;
    }
  EXPECT_EQ(rounds, 20);
  const double after = test_loss(factory, trainer.model_state());
  std::cout << rule_name(c.rule) << " " << mode_name(c.mode) << ": test loss " << before << " -> " << after << "\n";
  EXPECT_LT(after, before - 0.2) << rule_name(c.rule) << " " << mode_name(c.mode);
}

INSTANTIATE_TEST_SUITE_P(Cyclic, FashionTest,
                         ::testing::Values(Case{Rule::Dp, Mode::DpWorkers}, Case{Rule::CdpV1, Mode::DpWorkers},
                                           Case{Rule::CdpV2, Mode::DpWorkers}, Case{Rule::CdpV2, Mode::ModelParallel},
                                           Case{Rule::CdpV2, Mode::Zero}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           std::string s = std::string(rule_name(info.param.rule)) + "_" + mode_name(info.param.mode);
                           for (char& ch : s)
                             if (ch == '-') ch = '_';
                           return s;
                         });

}  // namespace
}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
