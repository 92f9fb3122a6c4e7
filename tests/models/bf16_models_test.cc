// Zoo models under the bf16 precision policy (runtime/tensor/precision.h), on the CPU and on CUDA (the simulated
// GPU in CI; skipped without a GPU): a training step of ResNet-18 and MobileNetV2 computes in bf16 with f32
// parameters, f32 gradients and an f32 loss, lands near the f32 step (loss within 5%, the classifier's gradient
// pointing the f32 one's way: deeper layers' gradients drift further from f32 through each train-mode batch norm
// over a small batch, to a cosine of about 0.5 over all of MobileNetV2's at 32x32), and keeps at most 70% of the
// activation memory for backward.
#include <gtest/gtest.h>

#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "models/losses.h"
#include "models/registry.h"
#include "runtime/memory/memory.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/precision.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

// Images large enough that activations outweigh the weights' bf16 copies (which forward keeps too): ResNet-18 of
// width 8 at 16x16 keeps more bytes in bf16 than in f32.
struct ModelCase {
  const char* spec;
  int64_t size;
};
const ModelCase kModels[] = {{"resnet18:cifar,classes=10,width=8", 32},
                             {"mobilenet_v2:cifar,classes=10,width_mult=0.25", 16}};

struct Step {
  DType output_dtype = DType::F32;
  double loss = 0;
  Tensor head_grads;  // the classifier's (the last two parameters') gradients, flattened, f64 on the CPU
  std::vector<DType> grad_dtypes, param_dtypes;
  int64_t activations = 0;  // bytes of the Activations category held after forward (what backward reads)
};

Step train_step(const ModelCase& c, Device device, Precision precision, uint64_t seed, const Tensor& images,
                const Tensor& labels) {
  auto spec = parse_model_spec(c.spec);
  spec.second.seed = seed;
  std::shared_ptr<Network> model = make_model(spec.first, spec.second);
  model->to(device);
  model->train();
  Step s;
  auto tracker = std::make_shared<MemoryTracker>("step");
  {
    MemoryScope scope(tracker);
    PrecisionGuard policy(precision);
    Tensor out = model->forward(images.to(device));
    s.output_dtype = out.dtype();
    Tensor loss = cross_entropy(out, labels.to(device));
    s.activations = tracker->counters().cur(MemoryCategory::Activations);
    s.loss = loss.to(Device::cpu()).to(DType::F64).item<double>();
    loss.backward();
  }
  std::vector<Tensor> flat;
  for (const auto& p : model->named_parameters()) {
    s.param_dtypes.push_back(p.second.dtype());
    s.grad_dtypes.push_back(p.second.grad().dtype());
    flat.push_back(p.second.grad().detach().to(Device::cpu()).to(DType::F64).reshape({-1}));
  }
  s.head_grads = concat({flat[flat.size() - 2], flat.back()}, 0);
  return s;
}

double cosine(const Tensor& a, const Tensor& b) {
  const double ab = sum(mul(a, b)).item<double>(), aa = sum(mul(a, a)).item<double>();
  const double bb = sum(mul(b, b)).item<double>();
  return ab / std::sqrt(aa * bb);
}

void check(const ModelCase& c, Device device) {
  Generator gen(tandem::testing::fresh_seed());
  const uint64_t seed = tandem::testing::fresh_seed();
  const Tensor images = randn({4, 3, c.size, c.size}, gen), labels = from_vector<int64_t>({3, 7, 1, 0}, {4});
  const Step f32 = train_step(c, device, Precision::F32, seed, images, labels);
  const Step bf16 = train_step(c, device, Precision::BF16, seed, images, labels);
  const std::string what = std::string(c.spec) + " on " + device.str();
  EXPECT_EQ(f32.output_dtype, DType::F32) << what;
  EXPECT_EQ(bf16.output_dtype, DType::BF16) << what;
  for (size_t i = 0; i < bf16.grad_dtypes.size(); ++i) {
    EXPECT_EQ(bf16.param_dtypes[i], DType::F32) << what << ": master weights stay f32";
    EXPECT_EQ(bf16.grad_dtypes[i], DType::F32) << what << ": gradients of f32 leaves are f32";
  }
  EXPECT_TRUE(std::isfinite(bf16.loss)) << what;
  EXPECT_NEAR(bf16.loss, f32.loss, 0.05 * std::fabs(f32.loss)) << what;
  // MobileNetV2's measured 0.936 to 0.97 over 16 seeds (ResNet-18's higher): 0.85 leaves room for other seeds.
  EXPECT_GT(cosine(bf16.head_grads, f32.head_grads), 0.85) << what << ": the classifier's gradient";
  // What forward keeps for backward about halves; the weights' bf16 copies, the f32 batch-norm statistics and
  // the f32 loss keep it above one half.
  EXPECT_LT(bf16.activations, 0.7 * f32.activations)
      << what << ": " << bf16.activations << " bytes of activations in bf16, " << f32.activations << " in f32";
}

class Bf16Models : public ::testing::TestWithParam<ModelCase> {};

TEST_P(Bf16Models, TrainingStepOnCpu) { check(GetParam(), Device::cpu()); }

TEST_P(Bf16Models, TrainingStepOnCuda) {
  TD_REQUIRE_GPU();
  check(GetParam(), Device::cuda(0));
}

INSTANTIATE_TEST_SUITE_P(Zoo, Bf16Models, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<ModelCase>& i) {
                           return std::string(i.param.spec).substr(0, std::string(i.param.spec).find(':'));
                         });

}  // namespace
}  // namespace models
}  // namespace tandem
