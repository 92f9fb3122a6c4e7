// Channels-last training keeps its layout: ResNet-18, ResNet-50 and MobileNetV2 with channels-last weights
// (Module::to_channels_last) run a training step (forward, cross-entropy, backward, SGD with momentum) on a
// channels-last batch without copying any dense tensor into another layout after the input's conversion
// (layout_conversion_count), keep every gradient and momentum buffer in its parameter's layout, and compute what
// the NCHW run computes; on the CPU and on CUDA (the simulated GPU in CI; skipped without a GPU).
#include <gtest/gtest.h>

#include <algorithm>
#include <memory>
#include <string>
#include <vector>

#include "models/losses.h"
#include "models/registry.h"
#include "runtime/base/config.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/optim/optim.h"
#include "runtime/tensor/layout.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

struct ModelCase {
  const char* name;
  const char* spec;
};
// 48x48 images with ImageNet stems (the ResNets' max pool runs): the last stages reach 2x2, and global pooling 1x1,
// where the size-1 dims make the pooled activations and their gradients both NCHW and channels-last in memory.
// MobileNetV2 keeps its classifier dropout. Batch 2.
const ModelCase kModels[] = {
    {"ResNet18", "resnet18:classes=10,width=8"},
    {"ResNet50", "resnet50:classes=10,width=8"},
    {"MobileNetV2", "mobilenet_v2:classes=10,width_mult=0.25"},
};
const Shape kInput = {2, 3, 48, 48};

// What one training step left, on the host in f64, and how many layout conversions it made.
struct Step {
  Tensor output;
  NamedTensors grads, params;
  int64_t conversions = 0;
};

Step train_step(const ModelCase& c, Device device, DType dtype, bool channels_last, uint64_t seed, const Tensor& images,
                const Tensor& labels) {
  auto spec = parse_model_spec(c.spec);
  spec.second.seed = seed;
  std::shared_ptr<Network> model = make_model(spec.first, spec.second);
  model->to(dtype);
  model->to(device);
  Tensor x = images.to(dtype).to(device);
  if (channels_last) {
    model->to_channels_last();
    x = to_channels_last(x);
  }
  model->train();
  optim::SgdOptions so;
  so.lr = 0.1;
  so.momentum = 0.9;
  so.weight_decay = 5e-4;
  optim::Sgd opt(optim::single_group(model->named_parameters()), so);

  const int64_t before = layout_conversion_count();
  Tensor out = model->forward(x);
  cross_entropy(out, labels.to(device)).backward();
  opt.step();
  Step s;
  s.conversions = layout_conversion_count() - before;

  const std::string what = std::string(c.name) + (channels_last ? " channels-last" : " NCHW") + " on " + device.str() +
                           " in " + dtype_name(dtype);
  for (const auto& p : model->named_parameters()) {
    const Tensor& w = p.second;
    if (!w.grad().defined()) {
      ADD_FAILURE() << what << ": no gradient for " << p.first;
      continue;
    }
    EXPECT_TRUE(same_layout(w.grad(), w))
        << what << ": the gradient of " << p.first << " has strides " << shape_str(w.grad().strides())
        << ", the parameter " << shape_str(w.strides());
    if (channels_last && w.dim() == 4) {
      EXPECT_TRUE(is_channels_last(w) && suggests_channels_last(w))
          << what << ": " << p.first << " has strides " << shape_str(w.strides());
    }
    s.grads.emplace_back(p.first, w.grad().to(Device::cpu()).to(DType::F64));
    s.params.emplace_back(p.first, w.detach().to(Device::cpu()).to(DType::F64));
  }
  const NamedTensors state = opt.state_dict();
  EXPECT_EQ(state.size(), s.params.size()) << what;
  for (const auto& b : state) {
    const std::string param = b.first.substr(0, b.first.rfind('.'));
    for (const auto& p : model->named_parameters())
      if (p.first == param) {
        EXPECT_TRUE(same_layout(b.second, p.second))
            << what << ": " << b.first << " has strides " << shape_str(b.second.strides());
      }
  }
  s.output = out.to(Device::cpu()).to(DType::F64);
  return s;
}

// The largest magnitude over a list of tensors.
double scale_of(const NamedTensors& ts) {
  double m = 0;
  for (const auto& t : ts) m = std::max(m, tandem::testing::max_magnitude(t.second));
  return m;
}

// The output, each gradient and each updated parameter of a step, named, with the scale they are compared at: the
// reference step's largest gradient or parameter (some are mathematically zero, a batch-norm bias before a
// train-mode batch norm, and hold only rounding); 0 for the output (its own magnitude).
struct Result {
  std::string name;
  Tensor value;
  double scale;
};
std::vector<Result> results(const Step& s, const Step& reference) {
  std::vector<Result> out{{"output", s.output, 0.0}};
  const double gs = scale_of(reference.grads), ps = scale_of(reference.params);
  for (const auto& g : s.grads) out.push_back({"gradient of " + g.first, g.second, gs});
  for (const auto& p : s.params) out.push_back({"updated " + p.first, p.second, ps});
  return out;
}

// The inputs of one case: fresh weights (a seed), images and labels, and the exact step they give, NCHW in f64 on
// the CPU, which the steps under test are compared with.
struct Case {
  uint64_t seed;
  Tensor images, labels;
  Step exact;
};
Case make_case(const ModelCase& c) {
  Generator gen(tandem::testing::fresh_seed());
  Case k{tandem::testing::fresh_seed(), randn(kInput, gen, DType::F64), from_vector<int64_t>({3, 7}, {2}), {}};
  k.exact = train_step(c, Device::cpu(), DType::F64, false, k.seed, k.images, k.labels);
  EXPECT_EQ(k.exact.conversions, 0) << c.name << ": layout conversions in the NCHW step";
  return k;
}

// A step on `device` with no layout conversion (after the input's).
Step step_without_conversions(const ModelCase& c, const Case& k, Device device, DType dtype, bool channels_last) {
  Step s = train_step(c, device, dtype, channels_last, k.seed, k.images, k.labels);
  EXPECT_EQ(s.conversions, 0) << c.name << (channels_last ? " channels-last" : " NCHW") << " on " << device << " in "
                              << dtype_name(dtype) << ": layout conversions in the step";
  return s;
}

// f64: the channels-last step computes the NCHW step's function, in other summation orders (convolutions, batch-norm
// statistics over NHWC) and on CUDA on another backend, to ~1e-15 per operation; 1e-8 leaves room for its growth
// through ~50 layers, as between the backends in tests/models/cuda_test (on the CPU both layouts give the same
// values).
void check_f64(const ModelCase& c, Device device) {
  tandem::testing::NumericsGuard tf32_off(false, deterministic());
  const Case k = make_case(c);
  const Step cl = step_without_conversions(c, k, device, DType::F64, true);
  const std::vector<Result> want = results(k.exact, k.exact), got = results(cl, k.exact);
  ASSERT_EQ(got.size(), want.size());
  for (size_t i = 0; i < want.size(); ++i)
    tandem::testing::expect_close(got[i].value, want[i].value, 1e-8,
                                  std::string(c.name) + " channels-last on " + device.str() + ": " + want[i].name,
                                  want[i].scale);
}

// f32: train-mode batch norm over 2 images (8 values per channel at 2x2) amplifies rounding, so that the NCHW f32
// step differs from the f64 step by up to about 1% of the model's gradient scale, as PyTorch's own f32 and f64
// results do (and by orders of magnitude more at 1x1, 2 values per channel, where even f64 steps differ). The
// channels-last f32 step must be as close to the f64 step as the NCHW f32 step on the same device is: within twice
// its error, or 1e-4 of the scale, whichever is larger. Measured on the CPU over 8 seeds: at most 1.08 times the
// NCHW error.
void check_f32(const ModelCase& c, Device device) {
  tandem::testing::NumericsGuard tf32_off(false, deterministic());
  const Case k = make_case(c);
  const Step nchw = step_without_conversions(c, k, device, DType::F32, false);
  const Step cl = step_without_conversions(c, k, device, DType::F32, true);
  const std::vector<Result> want = results(k.exact, k.exact), n32 = results(nchw, k.exact), c32 = results(cl, k.exact);
  ASSERT_TRUE(n32.size() == want.size() && c32.size() == want.size());
  for (size_t i = 0; i < want.size(); ++i) {
    const double e_nchw = tandem::testing::max_rel_error(n32[i].value, want[i].value, want[i].scale);
    const double e_cl = tandem::testing::max_rel_error(c32[i].value, want[i].value, want[i].scale);
    EXPECT_LE(e_cl, std::max(2 * e_nchw, 1e-4))
        << c.name << " channels-last on " << device << " in f32: " << want[i].name << " differs from the f64 step by "
        << e_cl << " where the NCHW f32 step differs by " << e_nchw;
  }
}

class Layouts : public ::testing::TestWithParam<ModelCase> {};

TEST_P(Layouts, F32StepOnCpuKeepsItsLayout) { check_f32(GetParam(), Device::cpu()); }
TEST_P(Layouts, F64StepOnCpuEqualsNchw) { check_f64(GetParam(), Device::cpu()); }

TEST_P(Layouts, F32StepOnCudaKeepsItsLayout) {
  TD_REQUIRE_GPU();
  check_f32(GetParam(), Device::cuda());
}

TEST_P(Layouts, F64StepOnCudaEqualsNchw) {
  TD_REQUIRE_GPU();
  check_f64(GetParam(), Device::cuda());
}

INSTANTIATE_TEST_SUITE_P(Zoo, Layouts, ::testing::ValuesIn(kModels),
                         [](const ::testing::TestParamInfo<ModelCase>& i) { return std::string(i.param.name); });

}  // namespace
}  // namespace models
}  // namespace tandem
