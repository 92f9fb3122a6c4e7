// CUDA against the CPU for every layer, loss, optimizer and zoo model: the same weights and inputs forward and
// backward on both devices (TF32 off), compared elementwise. Skips without a GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <map>
#include <sstream>
#include <string>

#include "models/blocks.h"
#include "models/layers.h"
#include "models/losses.h"
#include "models/registry.h"
#include "models/sequential.h"
#include "models/zoo/mobilenet_v2.h"
#include "models/zoo/resnet.h"
#include "models/zoo/supernet.h"
#include "runtime/base/config.h"
#include "runtime/base/error.h"
#include "runtime/optim/optim.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"
#include "tools/train/trainer.h"

namespace tandem {
namespace models {
namespace {

using tandem::testing::fresh_seed;

// Builds the module twice (same seed), moves one copy to cuda:0, runs forward and backward of
// sum(module(x) * w) on both, and compares outputs, input gradients, parameter gradients and buffers.
// The f32 tolerance: the two backends differ by f32 rounding in other summation orders; over 8 seeds of the
// layers below (simulated GPU) the largest error was 5.8e-7 relative to the tensor's magnitude (parameter
// gradients: the module's gradient magnitude), about 10 units of f32 rounding. 1e-5 leaves 17 times that, while
// an error of 1e-5 of the scale in any element (a wrong term of a sum, a lost or doubled contribution) fails.
void expect_cuda_matches_cpu(const std::function<ModulePtr(Generator&)>& build, const Shape& input, bool training,
                             const std::string& what, double tol = 1e-5, DType dtype = DType::F32) {
  tandem::testing::NumericsGuard tf32_off(false, deterministic());
  uint64_t seed = fresh_seed();
  Generator g1(seed), g2(seed);
  ModulePtr cpu = build(g1), gpu = build(g2);
  cpu->to(dtype);
  gpu->to(dtype);
  gpu->to(Device::cuda());
  cpu->train(training);
  gpu->train(training);
  Generator data(fresh_seed());
  Tensor x = randn(input, data).to(dtype);
  Tensor w = randn(cpu->output_shape(input), data).to(dtype);
  Tensor xc = x.clone().set_requires_grad(true);
  Tensor xg = x.to(Device::cuda()).set_requires_grad(true);
  Tensor yc = cpu->forward(xc), yg = gpu->forward(xg);
  sum(mul(yc, w)).backward();
  sum(mul(yg, w.to(Device::cuda()))).backward();
  tandem::testing::expect_close(yg.to(Device::cpu()), yc, tol, what + ": output");
  tandem::testing::expect_close(xg.grad().to(Device::cpu()), xc.grad(), tol, what + ": input gradient");
  auto pc = cpu->named_parameters(), pg = gpu->named_parameters();
  ASSERT_EQ(pc.size(), pg.size());
  // Parameter gradients relative to the module's largest: each sums terms of about that size, and some are
  // mathematically zero (a batch-norm bias feeding a convolution and another train-mode batch norm, as in every
  // MobileNetV2 block), holding only rounding.
  double grad_scale = 0;
  for (auto& p : pc)
    if (p.second.grad().defined()) grad_scale = std::max(grad_scale, tandem::testing::max_magnitude(p.second.grad()));
  for (size_t i = 0; i < pc.size(); ++i) {
    ASSERT_EQ(pc[i].second.grad().defined(), pg[i].second.grad().defined()) << what << " " << pc[i].first;
    if (pc[i].second.grad().defined())
      tandem::testing::expect_close(pg[i].second.grad().to(Device::cpu()), pc[i].second.grad(), tol,
                                    what + ": gradient of " + pc[i].first, grad_scale);
  }
  // Buffers relative to the largest of their kind in the module (running means: some are mathematically zero,
  // those of a batch norm after a convolution of another batch norm's output).
  auto bc = cpu->named_buffers(), bg = gpu->named_buffers();
  auto kind = [](const std::string& name) { return name.substr(name.rfind('.') + 1); };
  std::map<std::string, double> buffer_scale;
  for (auto& b : bc)
    if (is_floating(b.second.dtype()))
      buffer_scale[kind(b.first)] = std::max(buffer_scale[kind(b.first)], tandem::testing::max_magnitude(b.second));
  for (size_t i = 0; i < bc.size(); ++i)
    tandem::testing::expect_close(bg[i].second.to(Device::cpu()), bc[i].second, tol, what + ": " + bc[i].first,
                                  buffer_scale[kind(bc[i].first)]);
}

TEST(CudaModels, LayersMatchCpu) {
  TD_REQUIRE_GPU();
  for (const Conv2dSpec& s : {Conv2dSpec{3, 8, 3, 1, 1, 1, 1, false}, Conv2dSpec{8, 16, 3, 2, 1, 1, 1, true},
                              Conv2dSpec{6, 6, 3, 1, 2, 2, 1, false}, Conv2dSpec{8, 8, 5, 2, 2, 1, 8, false},
                              Conv2dSpec{8, 12, 1, 1, 0, 1, 4, true}, Conv2dSpec{3, 8, 7, 2, 3, 1, 1, false}})
    expect_cuda_matches_cpu([&](Generator& g) { return std::make_shared<Conv2d>(s, g); }, {4, s.in_channels, 11, 10},
                            true, "conv " + std::to_string(s.kernel));
  for (bool training : {true, false})
    expect_cuda_matches_cpu([](Generator&) { return std::make_shared<BatchNorm2d>(5); }, {4, 5, 6, 7}, training,
                            training ? "batch norm (train)" : "batch norm (eval)");
  expect_cuda_matches_cpu([](Generator& g) { return std::make_shared<Linear>(17, 9, true, g); }, {6, 17}, true,
                          "linear");
  expect_cuda_matches_cpu([](Generator&) { return std::make_shared<MaxPool2d>(3, 2, 1); }, {2, 3, 9, 9}, true,
                          "max pool");
  expect_cuda_matches_cpu([](Generator&) { return std::make_shared<AvgPool2d>(3, 2, 1); }, {2, 3, 9, 9}, true,
                          "avg pool");
  expect_cuda_matches_cpu([](Generator&) { return std::make_shared<GlobalAvgPool>(); }, {2, 3, 5, 4}, true, "gap");
  expect_cuda_matches_cpu([](Generator&) { return std::make_shared<AdaptiveAvgPoolFlatten>(2); }, {2, 3, 4, 6}, true,
                          "adaptive pool");
  expect_cuda_matches_cpu([](Generator&) { return std::make_shared<ReLU6>(); }, {2, 3, 4, 4}, true, "relu6");
  expect_cuda_matches_cpu(
      [](Generator& g) {
        auto seq = std::make_shared<Sequential>();
        seq->add(std::make_shared<Residual>(std::make_shared<Conv2d>(Conv2dSpec{3, 3, 3, 1, 1, 1, 1, false}, g),
                                            nullptr, true));
        seq->add(std::make_shared<ReLU>());
        seq->add(std::make_shared<Identity>());
        seq->add(std::make_shared<Flatten>());
        return seq;
      },
      {2, 3, 5, 5}, true, "residual, relu, identity, flatten");
  expect_cuda_matches_cpu([](Generator&) { return std::make_shared<Dropout>(0.3, 99); }, {8, 64}, true, "dropout");
  expect_cuda_matches_cpu([](Generator& g) { return std::make_shared<BasicBlock>(4, 8, 2, false, g); }, {2, 4, 8, 8},
                          true, "basic block");
  expect_cuda_matches_cpu([](Generator& g) { return std::make_shared<Bottleneck>(8, 4, 2, true, g); }, {2, 8, 8, 8},
                          true, "separable bottleneck");
  expect_cuda_matches_cpu([](Generator& g) { return std::make_shared<InvertedResidual>(8, 8, 1, 6, 7, true, g); },
                          {2, 8, 8, 8}, true, "inverted residual 7x7");
  expect_cuda_matches_cpu(
      [](Generator& g) {
        SupernetCellSpec cs;
        cs.in = cs.out = 8;
        cs.sample_seed = 5;
        return std::make_shared<SupernetCell>(cs, g);
      },
      {2, 8, 8, 8}, true, "supernet cell");
}

TEST(CudaModels, ZooModelsMatchCpu) {
  TD_REQUIRE_GPU();
  const std::pair<const char*, Shape> cases[] = {
      {"resnet18:cifar,width=8,classes=10", {4, 3, 32, 32}},
      {"resnet50:width=8,classes=10", {4, 3, 64, 64}},
      {"mobilenet_v2:cifar,width_mult=0.5,classes=10,dropout=0", {4, 3, 32, 32}},
      {"vgg16_bn:cifar,width=8,classes=10,dropout=0", {4, 3, 32, 32}},
  };
  // In f64: both backends then compute the same function to ~1e-15 per operation, and 1e-8 leaves room for its
  // growth through ~50 layers. In f32 the comparison says little: train-mode BatchNorm over a batch of 4 amplifies
  // the rounding of different summation orders (cuDNN's and the CPU's) to several percent in some gradients, as
  // between PyTorch's own f32 and f64 results.
  for (const auto& c : cases) {
    auto spec = parse_model_spec(c.first);
    expect_cuda_matches_cpu([&](Generator&) { return make_model(spec.first, spec.second); }, c.second, true, c.first,
                            1e-8, DType::F64);
  }
}

TEST(CudaModels, StudentBlocksMatchCpu) {
  TD_REQUIRE_GPU();
  auto spec = parse_model_spec("mobilenet_v2:cifar,width_mult=0.5,classes=10");
  auto teacher = make_model(spec.first, spec.second);
  Shape in = {4, 3, 32, 32};
  auto shapes = block_shapes(teacher->blocks(), in);
  for (size_t i = 0; i < shapes.size(); ++i) {
    StudentOptions so;
    so.seed = 3;
    // f64, as for the zoo models (and cuDNN's non-deterministic algorithms vary the f32 rounding per call).
    expect_cuda_matches_cpu([&](Generator&) { return make_student_block(*teacher, i, in, so); }, shapes[i].input, true,
                            "supernet student block " + std::to_string(i), 1e-8, DType::F64);
  }
}

TEST(CudaModels, LossesMatchCpu) {
  TD_REQUIRE_GPU();
  Generator gen(fresh_seed());
  Tensor logits = randn({8, 10}, gen), teacher = randn({8, 10}, gen);
  Tensor labels = from_vector<int64_t>({0, 3, 9, 1, 1, 4, 7, 2}, {8});
  Device cuda = Device::cuda();
  auto check = [&](const std::function<Tensor(const Tensor&, Device)>& loss, const std::string& what) {
    Tensor a = logits.clone().set_requires_grad(true), b = logits.to(cuda).set_requires_grad(true);
    Tensor la = loss(a, Device::cpu()), lb = loss(b, cuda);
    la.backward();
    lb.backward();
    tandem::testing::expect_close(lb.to(Device::cpu()), la, 1e-5, what);
    tandem::testing::expect_close(b.grad().to(Device::cpu()), a.grad(), 1e-5, what + " gradient");
  };
  check([&](const Tensor& x, Device d) { return cross_entropy(x, labels.to(d), 0.1); }, "cross entropy");
  check([&](const Tensor& x, Device d) { return soft_cross_entropy(x, teacher.to(d), 2.0); }, "soft cross entropy");
  check([&](const Tensor& x, Device d) { return mse_loss(x, teacher.to(d)); }, "mse");
  check([&](const Tensor& x, Device d) { return kl_div(log_softmax(x, 1), softmax(teacher.to(d), 1)); }, "kl");
  // A bad label on the device surfaces as IndexError at the next synchronization.
  EXPECT_THROW(
      cross_entropy(logits.to(cuda), from_vector<int64_t>({0, 3, 9, 1, 1, 4, 7, 10}, {8}).to(cuda)).to(Device::cpu()),
      IndexError);
}

TEST(CudaModels, OptimizersMatchCpu) {
  TD_REQUIRE_GPU();
  for (int kind = 0; kind < 3; ++kind) {
    Generator gen(fresh_seed());
    Tensor p = randn({33, 7}, gen), q = randn({5}, gen);
    NamedTensors cpu = {{"p", p.clone().set_requires_grad(true)}, {"q", q.clone().set_requires_grad(true)}};
    NamedTensors gpu = {{"p", p.to(Device::cuda()).set_requires_grad(true)},
                        {"q", q.to(Device::cuda()).set_requires_grad(true)}};
    auto make = [&](const NamedTensors& params) -> std::unique_ptr<optim::Optimizer> {
      if (kind == 0) {
        optim::SgdOptions o;
        o.momentum = 0.9;
        o.nesterov = true;
        o.weight_decay = 1e-3;
        return std::make_unique<optim::Sgd>(optim::single_group(params), o);
      }
      optim::AdamOptions o = kind == 1 ? optim::AdamOptions{} : optim::adamw_options(1e-2);
      return std::make_unique<optim::Adam>(optim::single_group(params), o);
    };
    auto oc = make(cpu), og = make(gpu);
    for (int step = 0; step < 4; ++step) {
      for (size_t i = 0; i < 2; ++i) {
        Tensor g = randn(cpu[i].second.shape(), gen);
        cpu[i].second.set_grad(g);
        gpu[i].second.set_grad(g.to(Device::cuda()));
      }
      oc->step();
      og->step();
    }
    for (size_t i = 0; i < 2; ++i)
      tandem::testing::expect_close(gpu[i].second.to(Device::cpu()), cpu[i].second, 1e-5, oc->name());
  }
}

// One epoch of `model` on `dataset` in batches of 16 on the GPU, without log lines.
train::TrainOptions one_cuda_epoch(const std::string& model, const std::string& dataset) {
  train::TrainOptions o;
  o.model = model;
  o.dataset = dataset;
  o.epochs = 1;
  o.batch = 16;
  o.lr = 0.05;
  o.device = "cuda";
  o.log_every = 0;
  return o;
}

TEST(CudaModels, TrainerLearnsOnCuda) {
  TD_REQUIRE_GPU();
  // A whole epoch of simulated kernels under ASan takes 45 s of the test command's 30 minutes; its plain run on the
  // simulated GPU (and a real GPU) trains it.
  if (tandem::testing::sanitizer_run()) GTEST_SKIP() << "an epoch under ASan: the plain simulated-GPU run has it";
  // The data and model of train_test's CPU run, which reaches more than 90% there.
  train::TrainOptions o = one_cuda_epoch("resnet18:cifar,width=8", "synthetic:n=384,h=12,w=12,classes=4,noise=96");
  std::ostringstream log;
  auto r = train::Trainer(o, log).run();
  ASSERT_EQ(r.size(), 1u);
  EXPECT_LT(r[0].step_losses.back(), 0.3 * r[0].step_losses.front()) << log.str();
  EXPECT_GT(r[0].test_accuracy, 0.9) << log.str();
}

// train --cuda-graph: the warm-up step eager, the others replays of one captured graph, with losses bitwise those
// of the eager run (deterministic algorithms).
TEST(CudaModels, TrainerWithACudaGraphRepeatsTheEagerLossesBitwise) {
  TD_REQUIRE_GPU();
  tandem::testing::NumericsGuard deterministic(false, true);
  train::TrainOptions o = one_cuda_epoch("resnet18:cifar,width=4", "synthetic:n=48,h=8,w=8,classes=4");
  o.evaluate = false;
  o.seed = tandem::testing::fresh_seed() % 1000;
  std::ostringstream eager_log, graph_log;
  auto eager = train::Trainer(o, eager_log).run();
  o.cuda_graph = true;
  auto graph = train::Trainer(o, graph_log).run();
  ASSERT_EQ(eager.size(), 1u);
  ASSERT_EQ(graph.size(), 1u);
  ASSERT_GE(eager[0].step_losses.size(), 3u);
  EXPECT_EQ(graph[0].step_losses, eager[0].step_losses) << graph_log.str();
  EXPECT_NE(graph_log.str().find("cuda graph: the step is "), std::string::npos) << graph_log.str();
  EXPECT_EQ(eager_log.str().find("cuda graph"), std::string::npos) << eager_log.str();
}

}  // namespace
}  // namespace models
}  // namespace tandem
