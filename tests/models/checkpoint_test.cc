// Training checkpoints: what is saved (model keys unprefixed, optimizer/scheduler/generator state prefixed),
// exact restoration, and clear errors for wrong or damaged files.
#include <gtest/gtest.h>

#include <cmath>
#include <fstream>

#include "models/checkpoint.h"
#include "models/registry.h"
#include "runtime/base/error.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

using tandem::testing::expect_error;
using tandem::testing::fresh_seed;

std::shared_ptr<Network> tiny_mnv2(uint64_t seed) {
  ModelOptions o;
  o.cifar = true;
  o.width_mult = 0.25;
  o.num_classes = 5;
  o.seed = seed;
  return make_model("mobilenet_v2", o);
}

struct TrainingRun {
  std::shared_ptr<Network> model;
  std::unique_ptr<optim::Sgd> opt;
  std::unique_ptr<optim::LrScheduler> sched;
  explicit TrainingRun(uint64_t seed) : model(tiny_mnv2(seed)) {
    optim::SgdOptions so;
    so.lr = 0.005;
    so.momentum = 0.9;
    so.nesterov = true;
    opt = std::make_unique<optim::Sgd>(optim::single_group(model->named_parameters()), so);
    sched = std::make_unique<optim::LrScheduler>(*opt, optim::cosine_lr(20));
  }
  float step(const Tensor& x, const Tensor& y) {
    opt->zero_grad();
    Tensor loss = mse_of(model->forward(x), y);
    loss.backward();
    opt->step();
    sched->step();
    return loss.item<float>();
  }
  static Tensor mse_of(const Tensor& a, const Tensor& b) { return mean(mul(sub(a, b), sub(a, b))); }
};

TEST(Checkpoint, HoldsPrefixedTrainingState) {
  TrainingRun r(fresh_seed());
  Generator gen(fresh_seed());
  r.step(randn({4, 3, 8, 8}, gen), randn({4, 5}, gen));
  std::string path = ::testing::TempDir() + "ck_keys.safetensors";
  save_checkpoint(path, *r.model, r.opt.get(), r.sched.get(), {{"epoch", "3"}});
  SafetensorsContents c = load_safetensors(path);
  EXPECT_EQ(c.metadata.at("epoch"), "3");
  EXPECT_EQ(c.metadata.at("tandem.optimizer"), "sgd");
  EXPECT_EQ(c.metadata.at("format"), "pt");
  ASSERT_NE(c.find("features.0.0.weight"), nullptr);
  ASSERT_NE(c.find("optimizer.features.0.0.weight.momentum_buffer"), nullptr);
  ASSERT_NE(c.find("scheduler.position"), nullptr);
  EXPECT_EQ(c.find("scheduler.position")->item<int64_t>(), 1);
  ASSERT_NE(c.find("rng.classifier.0.generator"), nullptr);
  // Model-only loading ignores the training state.
  auto fresh = tiny_mnv2(fresh_seed());
  load_weights(path, *fresh);
  tandem::testing::expect_bitwise_equal(fresh->state_dict()[0].second, r.model->state_dict()[0].second, "weights");
}

TEST(Checkpoint, RestoredRunContinuesBitwise) {
  uint64_t seed = fresh_seed();
  Generator data(fresh_seed());
  std::vector<std::pair<Tensor, Tensor>> batches;
  for (int i = 0; i < 6; ++i) batches.emplace_back(randn({4, 3, 16, 16}, data), randn({4, 5}, data));
  TrainingRun a(seed);
  std::vector<float> straight;
  for (auto& b : batches) straight.push_back(a.step(b.first, b.second));

  TrainingRun first(seed);
  std::vector<float> resumed;
  for (int i = 0; i < 3; ++i) resumed.push_back(first.step(batches[i].first, batches[i].second));
  std::string path = ::testing::TempDir() + "ck_resume.safetensors";
  save_checkpoint(path, *first.model, first.opt.get(), first.sched.get());
  TrainingRun second(seed + 1);  // other initial weights: all of them must come from the file
  load_checkpoint(path, *second.model, second.opt.get(), second.sched.get());
  EXPECT_EQ(second.sched->position(), 3);
  for (int i = 3; i < 6; ++i) resumed.push_back(second.step(batches[i].first, batches[i].second));
  ASSERT_EQ(resumed.size(), straight.size());
  for (size_t i = 0; i < straight.size(); ++i) EXPECT_EQ(resumed[i], straight[i]) << "step " << i;
  for (float v : straight) EXPECT_TRUE(std::isfinite(v)) << "the run diverged: the comparison means nothing";
  auto sa = a.model->state_dict(), sb = second.model->state_dict();
  for (size_t i = 0; i < sa.size(); ++i) tandem::testing::expect_bitwise_equal(sa[i].second, sb[i].second, sa[i].first);
}

TEST(Checkpoint, WrongOrDamagedFilesGiveClearErrors) {
  TrainingRun r(fresh_seed());
  std::string path = ::testing::TempDir() + "ck_errors.safetensors";
  save_checkpoint(path, *r.model, r.opt.get(), r.sched.get());
  // Another model.
  ModelOptions o;
  o.cifar = true;
  o.width = 4;
  o.num_classes = 5;
  auto resnet = make_model("resnet18", o);
  expect_error<ValueError>([&] { load_checkpoint(path, *resnet, nullptr, nullptr); }, "missing keys 'conv1.weight'");
  // Same model, other number of classes.
  ModelOptions m;
  m.cifar = true;
  m.width_mult = 0.25;
  m.num_classes = 7;
  auto other = make_model("mobilenet_v2", m);
  expect_error<ShapeError>([&] { load_checkpoint(path, *other, nullptr, nullptr); },
                           "key 'classifier.1.weight' has shape [5, 1280] in the checkpoint but [7, 1280]");
  // Another optimizer.
  optim::Adam adam(optim::single_group(r.model->named_parameters()), optim::AdamOptions{});
  expect_error<ValueError>([&] { load_checkpoint(path, *r.model, &adam, nullptr); },
                           "written with optimizer 'sgd' but is being resumed with 'adam'");
  // A weights-only file cannot resume training.
  std::string weights = ::testing::TempDir() + "ck_weights.safetensors";
  save_safetensors(weights, r.model->state_dict());
  expect_error<ValueError>([&] { load_checkpoint(weights, *r.model, r.opt.get(), nullptr); },
                           "holds no optimizer state");
  load_weights(weights, *r.model);
  // A truncated file.
  std::ifstream in(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::string cut = ::testing::TempDir() + "ck_cut.safetensors";
  std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  expect_error<IoError>([&] { load_checkpoint(cut, *r.model, r.opt.get(), r.sched.get()); }, "is truncated");
  expect_error<IoError>([&] { load_weights(::testing::TempDir() + "nope.safetensors", *r.model); }, "cannot open");
}

// Integer state (scheduler position, batch-norm batch counts, Adam's step) written as floats by another tool
// must hold whole numbers: NaN, 2.5 or 1e30 converted to an integer is undefined behaviour in C++, and a
// truncated position would resume a different schedule.
TEST(Checkpoint, IntegerStateMustBeWholeNumbers) {
  TrainingRun r(fresh_seed());
  const std::string path = ::testing::TempDir() + "ck_whole.safetensors";
  save_checkpoint(path, *r.model, r.opt.get(), r.sched.get());
  const SafetensorsContents good = load_safetensors(path);
  std::string counter;
  for (const auto& kv : good.tensors)
    if (kv.first.size() > 20 && kv.first.compare(kv.first.size() - 20, 20, ".num_batches_tracked") == 0)
      counter = kv.first;
  ASSERT_FALSE(counter.empty());
  auto with = [&](const std::string& key, double value) {
    NamedTensors t = good.tensors;
    for (auto& kv : t)
      if (kv.first == key) kv.second = full(kv.second.shape(), value, TensorOptions(DType::F64));
    save_safetensors(path, t, good.metadata);
  };
  for (double bad : {2.5, std::nan(""), 1e30, -1e30}) {
    with("scheduler.position", bad);
    expect_error<ValueError>([&] { load_checkpoint(path, *r.model, r.opt.get(), r.sched.get()); },
                             "LrScheduler state \"position\": element 0 is");
    with(counter, bad);
    expect_error<ValueError>([&] { load_checkpoint(path, *r.model, r.opt.get(), r.sched.get()); },
                             "load_state_dict: key '" + counter + "': element 0 is");
  }
  // Whole numbers in a float tensor are accepted, as PyTorch would convert them.
  with("scheduler.position", 3);
  load_checkpoint(path, *r.model, r.opt.get(), r.sched.get());
  EXPECT_EQ(r.sched->position(), 3);
}

}  // namespace
}  // namespace models
}  // namespace tandem
