// Module base: registration order, state dicts (PyTorch's names and order), loading errors, train/eval,
// frozen batch norm, dtype conversion and generator states.
#include <gtest/gtest.h>

#include "models/layers.h"
#include "models/sequential.h"
#include "runtime/base/error.h"
#include "runtime/memory/memory.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

using tandem::testing::expect_error;

std::vector<std::string> keys(const NamedTensors& t) {
  std::vector<std::string> out;
  for (const auto& kv : t) out.push_back(kv.first);
  return out;
}

// conv -> bn -> relu -> [dropout] -> flatten -> linear, nested one level deep.
std::shared_ptr<Sequential> small_model(Generator& gen) {
  Conv2dSpec cs;
  cs.in_channels = 2;
  cs.out_channels = 3;
  cs.kernel = 3;
  cs.padding = 1;
  cs.bias = true;
  auto body = std::make_shared<Sequential>();
  body->add(std::make_shared<Conv2d>(cs, gen));
  body->add(std::make_shared<BatchNorm2d>(3));
  body->add(std::make_shared<ReLU>());
  auto net = std::make_shared<Sequential>();
  net->add("features", body);
  net->add("drop", std::make_shared<Dropout>(0.5, 7));
  net->add("pool", std::make_shared<GlobalAvgPool>());
  net->add("fc", std::make_shared<Linear>(3, 4, true, gen));
  return net;
}

TEST(Module, NamesAndOrderFollowPyTorch) {
  Generator gen(tandem::testing::fresh_seed());
  auto net = small_model(gen);
  EXPECT_EQ(keys(net->named_parameters()),
            (std::vector<std::string>{"features.0.weight", "features.0.bias", "features.1.weight", "features.1.bias",
                                      "fc.weight", "fc.bias"}));
  EXPECT_EQ(keys(net->named_buffers()), (std::vector<std::string>{"features.1.running_mean", "features.1.running_var",
                                                                  "features.1.num_batches_tracked"}));
  // state_dict: per module, parameters then buffers (BatchNorm: weight, bias, running_mean, running_var,
  // num_batches_tracked).
  EXPECT_EQ(keys(net->state_dict()),
            (std::vector<std::string>{"features.0.weight", "features.0.bias", "features.1.weight", "features.1.bias",
                                      "features.1.running_mean", "features.1.running_var",
                                      "features.1.num_batches_tracked", "fc.weight", "fc.bias"}));
  EXPECT_EQ(net->num_parameters(), 3 * 2 * 9 + 3 + 3 + 3 + 4 * 3 + 4);
  EXPECT_EQ(keys(net->rng_state()), (std::vector<std::string>{"drop.generator"}));
  auto mods = net->named_modules();
  ASSERT_EQ(mods.size(), 8u);
  EXPECT_EQ(mods[0].first, "");
  EXPECT_EQ(mods[2].first, "features.0");
  EXPECT_EQ(mods[2].second->type_name(), "Conv2d");
  for (const auto& p : net->parameters()) EXPECT_TRUE(p.requires_grad());
  EXPECT_EQ(net->state_dict()[6].second.dtype(), DType::I64);
}

TEST(Module, ParametersAreChargedToTheParametersCategory) {
  Generator gen(tandem::testing::fresh_seed());
  int64_t before = memory_counters(Device::cpu()).cur(MemoryCategory::Parameters);
  auto net = small_model(gen);
  int64_t after = memory_counters(Device::cpu()).cur(MemoryCategory::Parameters);
  int64_t bytes = 0;
  for (const auto& kv : net->state_dict()) bytes += static_cast<int64_t>(kv.second.nbytes());
  EXPECT_GE(after - before, bytes);
}

TEST(Module, LoadStateDictCopiesAndChecks) {
  Generator g1(tandem::testing::fresh_seed()), g2(tandem::testing::fresh_seed());
  auto a = small_model(g1), b = small_model(g2);
  b->load_state_dict(a->state_dict());
  auto sa = a->state_dict(), sb = b->state_dict();
  for (size_t i = 0; i < sa.size(); ++i) tandem::testing::expect_bitwise_equal(sa[i].second, sb[i].second, sa[i].first);
  // Loaded values are copies: changing a's weights leaves b's alone.
  {
    autograd::NoGradGuard ng;
    a->named_parameters()[0].second.fill_(3.0);
  }
  EXPECT_NE(b->named_parameters()[0].second.to_vector<float>()[0], 3.0f);

  NamedTensors missing = a->state_dict();
  missing.erase(missing.begin() + 2);
  expect_error<ValueError>([&] { b->load_state_dict(missing); }, {"missing keys 'features.1.weight'"});
  NamedTensors extra = a->state_dict();
  extra.emplace_back("fc.extra", zeros({1}));
  expect_error<ValueError>([&] { b->load_state_dict(extra); }, {"unexpected keys 'fc.extra'"});
  b->load_state_dict(extra, /*strict=*/false);
  NamedTensors wrong = a->state_dict();
  wrong[7].second = zeros({4, 5});
  std::vector<float> before = b->named_parameters()[0].second.to_vector<float>();
  expect_error<ShapeError>([&] { b->load_state_dict(wrong); }, {"key 'fc.weight' has shape [4, 5]", "[4, 3]"});
  // A refused load changes nothing.
  EXPECT_EQ(b->named_parameters()[0].second.to_vector<float>(), before);
  NamedTensors twice = a->state_dict();
  twice.push_back(twice[0]);
  expect_error<ValueError>([&] { b->load_state_dict(twice); }, {"appears twice"});
}

TEST(Module, LoadConvertsDtypes) {
  Generator g(tandem::testing::fresh_seed());
  auto a = small_model(g);
  NamedTensors sd = a->state_dict();
  for (auto& kv : sd)
    if (kv.second.dtype() == DType::F32) kv.second = kv.second.to(DType::F64);
  sd[6].second = full({}, 12.0);  // num_batches_tracked written as a float
  a->load_state_dict(sd);
  EXPECT_EQ(a->state_dict()[6].second.item<int64_t>(), 12);
  // The host mirror of num_batches_tracked follows the load.
  a->train();
  a->forward(randn({2, 2, 4, 4}, g));
  EXPECT_EQ(a->state_dict()[6].second.item<int64_t>(), 13);
}

TEST(Module, TrainEvalAndFrozenBatchNorm) {
  Generator gen(tandem::testing::fresh_seed());
  auto net = small_model(gen);
  EXPECT_TRUE(net->is_training());
  net->eval();
  for (auto& m : net->named_modules()) EXPECT_FALSE(m.second->is_training()) << m.first;
  net->train();
  auto bn = std::dynamic_pointer_cast<BatchNorm2d>(
      std::dynamic_pointer_cast<Sequential>(net->named_children()[0].second)->at(1));
  ASSERT_NE(bn, nullptr);
  Tensor x = randn({4, 2, 5, 5}, gen, DType::F32) * 3.0 + 1.0;
  net->forward(x);
  EXPECT_EQ(bn->num_batches_tracked().item<int64_t>(), 1);
  std::vector<float> running = bn->running_mean.to_vector<float>();
  bn->set_frozen(true);
  EXPECT_FALSE(bn->weight.requires_grad());
  Tensor y = sum(net->forward(x));
  y.backward();
  EXPECT_EQ(bn->running_mean.to_vector<float>(), running) << "a frozen BatchNorm must not update its statistics";
  EXPECT_EQ(bn->num_batches_tracked().item<int64_t>(), 1);
  EXPECT_FALSE(bn->weight.grad().defined());
  // Frozen = evaluation statistics: same output as the network in eval mode.
  bn->set_frozen(false);
  net->eval();
  Tensor y_eval = net->forward(x);
  bn->set_frozen(true);
  bn->train(true);  // the rest stays in eval mode (dropout off) for the comparison
  tandem::testing::expect_bitwise_equal(net->forward(x), y_eval, "frozen BN in train mode vs eval");
}

TEST(Module, ConvertsToDoubleAndBack) {
  Generator gen(tandem::testing::fresh_seed());
  auto net = small_model(gen);
  std::vector<float> w = net->named_parameters()[0].second.to_vector<float>();
  net->to(DType::F64);
  for (const auto& kv : net->state_dict())
    EXPECT_EQ(kv.second.dtype(), kv.first.find("num_batches") != std::string::npos ? DType::I64 : DType::F64);
  for (const auto& p : net->parameters()) EXPECT_TRUE(p.requires_grad() && p.is_leaf());
  net->to(DType::F32);
  EXPECT_EQ(net->named_parameters()[0].second.to_vector<float>(), w);
  net->to(Device::cpu());  // already there: nothing changes
  EXPECT_EQ(net->named_parameters()[0].second.to_vector<float>(), w);
}

TEST(Module, GeneratorStatesRoundTrip) {
  Generator gen(tandem::testing::fresh_seed());
  auto net = small_model(gen);
  Tensor x = randn({2, 2, 4, 4}, gen);
  NamedTensors state = net->rng_state();
  Tensor y1 = net->forward(x);
  Tensor y2 = net->forward(x);
  EXPECT_GT(tandem::testing::max_rel_error(y1, y2), 0) << "dropout masks should differ between calls";
  net->load_rng_state(state);
  tandem::testing::expect_bitwise_equal(net->forward(x), y1, "after restoring the dropout generator");
  expect_error<ValueError>(
      [&] {
        net->load_rng_state({{"nope", zeros({2}, DType::I64)}});
      },
      {"no generator named 'nope'"});
  expect_error<ValueError>([&] { net->load_rng_state({{"drop.generator", zeros({3}, DType::I64)}}); }, {"shape [2]"});
}

TEST(Module, ZeroGradDropsGradients) {
  Generator gen(tandem::testing::fresh_seed());
  auto net = small_model(gen);
  sum(net->forward(randn({2, 2, 4, 4}, gen))).backward();
  for (const auto& p : net->named_parameters()) EXPECT_TRUE(p.second.grad().defined()) << p.first;
  net->zero_grad();
  for (const auto& p : net->named_parameters()) EXPECT_FALSE(p.second.grad().defined()) << p.first;
}

TEST(Module, SequentialShapeErrorsNameTheItem) {
  Generator gen(tandem::testing::fresh_seed());
  auto net = small_model(gen);
  EXPECT_EQ(net->output_shape({5, 2, 8, 8}), (Shape{5, 4}));
  expect_error<ShapeError>(
      [&] {
        net->output_shape({5, 3, 8, 8});
      },
      {"item 'features.0' (Conv2d(2, 3, kernel 3, padding 1))", "expects 2 input channels"});
  expect_error<ShapeError>([&] { net->output_shape({5, 2, 8}); }, {"4-D input"});
}

}  // namespace
}  // namespace models
}  // namespace tandem
