// Parity with PyTorch: torchvision models' weights, an input batch, and PyTorch's training-mode outputs, loss,
// gradients and running statistics (tests/data/parity_*.safetensors, written by bench/torch/parity.py in
// float64) against Tandem's forward and backward on the CPU (float32 and float64) and on CUDA.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <fstream>

#include "models/losses.h"
#include "models/registry.h"
#include "runtime/config.h"
#include "runtime/safetensors.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

// TANDEM_PARITY_DIR, else tests/data under the working directory (Bazel's runfiles root).
std::string golden_path(const std::string& model) {
  const char* dir = std::getenv("TANDEM_PARITY_DIR");
  return std::string(dir ? dir : "tests/data") + "/parity_" + model + ".safetensors";
}

// max |a - b| / max |b|: the error relative to the reference's scale.
double normwise_error(const Tensor& a, const Tensor& b) {
  std::vector<double> va = a.to(Device::cpu()).to_vector<double>(), vb = b.to_vector<double>();
  double diff = 0, scale = 0;
  for (size_t i = 0; i < va.size(); ++i) {
    if (!std::isfinite(va[i])) return INFINITY;
    diff = std::max(diff, std::abs(va[i] - vb[i]));
    scale = std::max(scale, std::abs(vb[i]));
  }
  return diff / std::max(scale, 1e-30);
}

void expect_match(const Tensor& got, const Tensor& want, double tol, const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": missing";
  ASSERT_EQ(got.shape(), want.shape()) << what;
  EXPECT_LE(normwise_error(got, want), tol) << what;
}

void check_model(const std::string& name, Device device, DType dtype, double tol) {
  std::string path = golden_path(name);
  if (!std::ifstream(path).good())
    GTEST_SKIP() << "golden file " << path << " is absent: run bench/torch/parity.py (PyTorch + torchvision) "
                 << "to write it, or point TANDEM_PARITY_DIR at its folder";
  SafetensorsContents c = load_safetensors(path);
  NamedTensors weights;
  for (const auto& kv : c.tensors)
    if (kv.first.rfind("parity.", 0) != 0) weights.push_back(kv);
  auto spec = parse_model_spec(c.metadata.at("model"));
  auto model = make_model(spec.first, spec.second);
  model->load_state_dict(weights);  // torchvision's keys and shapes, unchanged
  model->to(dtype);
  model->to(device);
  model->train();
  bool tf32 = allow_tf32();
  set_allow_tf32(false);
  Tensor x = c.find("parity.input")->to(dtype).to(device).set_requires_grad(true);
  Tensor logits = model->forward(x);
  Tensor loss = cross_entropy(logits, c.find("parity.labels")->to(device));
  loss.backward();
  set_allow_tf32(tf32);
  std::string where = name + " on " + device.str() + " in " + dtype_name(dtype);
  expect_match(logits, *c.find("parity.logits"), tol, where + ": logits");
  expect_match(loss, *c.find("parity.loss"), tol, where + ": loss");
  expect_match(x.grad(), *c.find("parity.grad.input"), tol, where + ": input gradient");
  int grads = 0, stats = 0;
  for (const auto& p : model->named_parameters())
    if (const Tensor* want = c.find("parity.grad." + p.first)) {
      expect_match(p.second.grad(), *want, tol, where + ": gradient of " + p.first);
      ++grads;
    }
  for (const auto& b : model->named_buffers())
    if (const Tensor* want = c.find("parity.after." + b.first)) {
      expect_match(b.second, *want, tol, where + ": " + b.first + " after the step");
      ++stats;
    }
  EXPECT_GE(grads, 5) << "the golden file names parameters the model does not have";
  EXPECT_GE(stats, 2);
}

TEST(Parity, ResNet18MatchesPyTorchOnCpu) {
  check_model("resnet18", Device::cpu(), DType::F32, 1e-4);
  check_model("resnet18", Device::cpu(), DType::F64, 1e-9);
}

TEST(Parity, MobileNetV2MatchesPyTorchOnCpu) {
  check_model("mobilenet_v2", Device::cpu(), DType::F32, 1e-4);
  check_model("mobilenet_v2", Device::cpu(), DType::F64, 1e-9);
}

TEST(Parity, ResNet18MatchesPyTorchOnCuda) {
  TD_REQUIRE_GPU();
  check_model("resnet18", Device::cuda(), DType::F32, 1e-4);
}

TEST(Parity, MobileNetV2MatchesPyTorchOnCuda) {
  TD_REQUIRE_GPU();
  check_model("mobilenet_v2", Device::cuda(), DType::F32, 1e-4);
}

}  // namespace
}  // namespace models
}  // namespace tandem
