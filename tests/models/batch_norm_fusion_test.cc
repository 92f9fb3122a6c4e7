// Models fuse batch norm with the ReLU/ReLU6 and residual add after it (BatchNorm2d::forward_act, Sequential's
// bn-relu pairs): a training step of ResNet-18 and MobileNetV2 computes what the unfused step computes (outputs,
// gradients, updated parameters, running statistics), and really runs the fused kernels (fewer kernel calls), on
// the CPU and on CUDA (the simulated GPU in CI; skipped without a GPU); a Residual block fuses its add and ReLU.
#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "models/layers.h"
#include "models/losses.h"
#include "models/registry.h"
#include "models/sequential.h"
#include "models/zoo/mobilenet_v2.h"
#include "runtime/optim/optim.h"
#include "tests/harness/call_counts.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

// CIFAR stems, batch 4: the last stages' 2x2 planes give 16 values per channel to each batch norm. MobileNetV2 at
// 12x12 keeps its simulated-GPU steps under 10 s.
struct ModelCase {
  const char* spec;
  int64_t size;
};
const ModelCase kModels[] = {{"resnet18:cifar,classes=10,width=8", 16},
                             {"mobilenet_v2:cifar,classes=10,width_mult=0.25", 12}};

// Sets batch_norm_fusion() while in scope.
class FusionGuard {
 public:
  explicit FusionGuard(bool on) : was_(batch_norm_fusion()) { set_batch_norm_fusion(on); }
  ~FusionGuard() { set_batch_norm_fusion(was_); }
  FusionGuard(const FusionGuard&) = delete;
  FusionGuard& operator=(const FusionGuard&) = delete;

 private:
  bool was_;
};

// Everything one training step leaves, on the host in f64, in a fixed order, and the kernel calls it made.
struct Step {
  std::vector<std::pair<std::string, Tensor>> values;
  int act_calls = 0, bn_calls = 0, total_calls = 0;
};

Step train_step(const char* spec_text, Device device, DType dtype, bool fused, uint64_t seed, const Tensor& images,
                const Tensor& labels) {
  FusionGuard fusion(fused);
  auto spec = parse_model_spec(spec_text);
  spec.second.seed = seed;
  std::shared_ptr<Network> model = make_model(spec.first, spec.second);
  model->to(dtype);
  model->to(device);
  model->train();
  optim::SgdOptions so;
  so.lr = 0.1;
  so.momentum = 0.9;
  optim::Sgd opt(optim::single_group(model->named_parameters()), so);
  Step s;
  Tensor out;
  {
    tandem::testing::CallCounts calls(device.type);
    out = model->forward(images.to(dtype).to(device));
    cross_entropy(out, labels.to(device)).backward();
    s.act_calls = calls.of("batch_norm_act_forward_train") + calls.of("batch_norm_act_backward");
    s.bn_calls = calls.of("batch_norm_forward_train") + calls.of("batch_norm_backward");
    s.total_calls = calls.total();
  }
  opt.step();
  auto host = [](const Tensor& t) { return t.detach().to(Device::cpu()).to(DType::F64); };
  s.values.emplace_back("output", host(out));
  for (const auto& p : model->named_parameters()) {
    s.values.emplace_back("gradient of " + p.first, host(p.second.grad()));
    s.values.emplace_back("updated " + p.first, host(p.second));
  }
  for (const auto& b : model->named_buffers())
    if (b.second.dtype() == dtype) s.values.emplace_back(b.first, host(b.second));
  return s;
}

// The largest magnitude over a step's values: gradients of biases before a train-mode batch norm are zero up to
// rounding, held to the step's scale.
double scale_of(const Step& s) {
  double m = 0;
  for (const auto& v : s.values) m = std::max(m, tandem::testing::max_magnitude(v.second));
  return m;
}

// The f32 steps' departures from the f64 step: each value where the fused step is further than twice the unfused
// step's error, and further than 1e-2 of the scale (none: an empty list).
std::vector<std::string> f32_departures(const char* spec, Device device, uint64_t seed, const Tensor& images,
                                        const Tensor& labels, const Step& exact) {
  const Step unfused32 = train_step(spec, device, DType::F32, false, seed, images, labels);
  const Step fused32 = train_step(spec, device, DType::F32, true, seed, images, labels);
  const double scale = scale_of(exact);
  std::vector<std::string> out;
  if (fused32.values.size() != exact.values.size()) return {"the fused f32 step left other values"};
  for (size_t i = 0; i < exact.values.size(); ++i) {
    const double e_unfused = tandem::testing::max_rel_error(unfused32.values[i].second, exact.values[i].second, scale);
    const double e_fused = tandem::testing::max_rel_error(fused32.values[i].second, exact.values[i].second, scale);
    if (e_fused > std::max(2 * e_unfused, 1e-2))
      out.push_back(exact.values[i].first + ": fused error " + std::to_string(e_fused) + ", unfused " +
                    std::to_string(e_unfused));
  }
  return out;
}

// f64: the fused step equals the unfused one to 1e-9 of the scale (the same function in other roundings). f32 (with
// f32: on the CPU; on the simulated GPU each step takes seconds and the op test covers the fused CUDA kernels in f32):
// the fused step as close to the f64 step as the unfused f32 step is (within twice its error, or 1e-2 of the
// scale). Train-mode batch norm over few values amplifies either's roundings, and an element that sits at a ReLU(6)
// kink within f32 rounding may take the other side of it in one and not the other: MobileNetV2's fused f32 step
// departed so for about 6 draws in 100, ResNet-18's in none. Traced block by block on one such draw: the fused
// forward's error against f64 was the unfused one's at every block (6.4e-5 and 5.6e-5 at the last), and one of the
// last bn-relu6's 20480 outputs sat on the other side of 0 (the fused residual adds round once, the unfused ones
// twice); its mask bit moved the bias gradient there by 1e-4 of the scale and every gradient below it by up to
// 7e-2. So a departure is checked again on fresh draws, and fails only when kDraws draws in a row depart: a
// difference in what the fused step computes departs on every draw. The f32 kernels themselves are held to f64
// formulas in cpu_batch_norm_f32_test and batch_norm_act_test.
constexpr int kDraws = 3;

void check(const ModelCase& c, Device device, bool with_f32) {
  const char* spec = c.spec;
  tandem::testing::NumericsGuard tf32_off(false, false);
  Generator gen(tandem::testing::fresh_seed());
  const Tensor labels = from_vector<int64_t>({3, 7, 1, 0}, {4});
  std::vector<std::string> departed;
  for (int draw = 0; draw < kDraws; ++draw) {
    const uint64_t seed = tandem::testing::fresh_seed();
    const Tensor images = randn({4, 3, c.size, c.size}, gen, DType::F64);
    const Step exact = train_step(spec, device, DType::F64, false, seed, images, labels);
    const Step f64 = train_step(spec, device, DType::F64, true, seed, images, labels);
    ASSERT_EQ(f64.values.size(), exact.values.size());
    for (size_t i = 0; i < exact.values.size(); ++i)
      tandem::testing::expect_close(f64.values[i].second, exact.values[i].second, 1e-9,
                                    std::string(spec) + " on " + device.str() + ": " + exact.values[i].first + " (f64)",
                                    scale_of(exact));
    // The fused path is taken: fused batch-norm kernels, and fewer kernel calls in all.
    EXPECT_EQ(exact.act_calls, 0) << spec;
    EXPECT_GT(f64.act_calls, 0) << spec;
    EXPECT_LT(f64.bn_calls, exact.bn_calls) << spec;
    EXPECT_LT(f64.total_calls, exact.total_calls) << spec;
    if (!with_f32) return;
    const std::vector<std::string> d = f32_departures(spec, device, seed, images, labels, exact);
    if (d.empty()) return;
    for (const std::string& m : d) departed.push_back("draw " + std::to_string(draw) + ": " + m);
  }
  ADD_FAILURE() << spec << " on " << device.str() << ": the fused f32 step departed on all " << kDraws << " draws:\n"
                << [&] {
                     std::string all;
                     for (const std::string& m : departed) all += "  " + m + "\n";
                     return all;
                   }();
}

class BatchNormFusion : public ::testing::TestWithParam<ModelCase> {};

TEST_P(BatchNormFusion, StepOnCpuEqualsUnfused) { check(GetParam(), Device::cpu(), true); }

TEST_P(BatchNormFusion, StepOnCudaEqualsUnfused) {
  TD_REQUIRE_GPU();
  check(GetParam(), Device::cuda(), false);
}

INSTANTIATE_TEST_SUITE_P(Models, BatchNormFusion, ::testing::ValuesIn(kModels));

// A block with its shortcut's add (and ReLU) fused into its last batch norm computes what the unfused block
// computes (output, input and parameter gradients; f64, to the model step's 1e-9: train-mode batch norm over few
// values amplifies the other summation order) with `fused_calls` fused kernel calls in all, none unfused.
void expect_block_fuses(const std::function<ModulePtr(Generator&)>& make, int fused_calls) {
  std::vector<Device> devices{Device::cpu()};
  if (cuda_available()) devices.push_back(Device::cuda());
  for (Device d : devices) {
    SCOPED_TRACE(d.str());
    Generator gen(tandem::testing::fresh_seed());
    ModulePtr block = make(gen);
    block->to(DType::F64);
    block->to(d);
    block->train();
    const Tensor x = randn({3, 4, 5, 5}, gen, DType::F64).to(d), gy = randn({3, 4, 5, 5}, gen, DType::F64).to(d);
    auto run = [&](bool fused, int* act_calls) {
      FusionGuard fusion(fused);
      Tensor xi = x.clone().set_requires_grad();
      block->zero_grad();
      tandem::testing::CallCounts calls(d.type);
      Tensor y = block->forward(xi);
      y.backward(gy);
      *act_calls = calls.of("batch_norm_act_forward_train") + calls.of("batch_norm_act_backward");
      std::vector<Tensor> out{y.detach(), xi.grad()};
      for (const auto& p : block->named_parameters()) out.push_back(p.second.grad());
      return out;
    };
    int fused = 0, unfused = 0;
    const std::vector<Tensor> want = run(false, &unfused), got = run(true, &fused);
    EXPECT_EQ(unfused, 0);
    EXPECT_EQ(fused, fused_calls);
    ASSERT_EQ(got.size(), want.size());
    for (size_t i = 0; i < want.size(); ++i)
      tandem::testing::expect_close(got[i], want[i], 1e-9, "value " + std::to_string(i));
  }
}

// A Residual whose body ends in a batch norm: add and relu_after in it (one fused call each way).
TEST(BatchNormFusion, ResidualBlockFusesItsAddAndRelu) {
  expect_block_fuses(
      [](Generator& gen) -> ModulePtr {
        auto body = std::make_shared<Sequential>();
        body->add(std::make_shared<Conv2d>(Conv2dSpec{4, 4, 3, 1, 1, 1, 1, false}, gen));
        body->add(std::make_shared<BatchNorm2d>(4));
        return std::make_shared<Residual>(body, std::make_shared<Conv2d>(Conv2dSpec{4, 4, 1, 1, 0, 1, 1, false}, gen),
                                          true);
      },
      2);
}

// MobileNetV2's InvertedResidual with its shortcut: the expansion's and the depthwise convolution's bn-relu6 and
// the projection's bn + shortcut, three fused calls each way.
TEST(BatchNormFusion, InvertedResidualFusesItsShortcutAdd) {
  expect_block_fuses(
      [](Generator& gen) -> ModulePtr { return std::make_shared<InvertedResidual>(4, 4, 1, 2, 3, true, gen); }, 6);
}

}  // namespace
}  // namespace models
}  // namespace tandem
