// Host work per step on the simulated GPU: after a warm-up step, training steps of a small ResNet create no cuDNN
// descriptor, set no device, allocate no workspace, fill nothing on the device for a host counter
// (num_batches_tracked), and (once the pool has settled) take no new memory. The simulator counts the calls
// (tandem_cudasim_call_count); a real GPU has no such counts, and the test skips there.
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "models/layers.h"
#include "models/losses.h"
#include "models/registry.h"
#include "runtime/memory/memory.h"
#include "runtime/memory/stream.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/optim/optim.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace models {
namespace {

using CallCount = unsigned long long (*)(const char*);

// The simulated GPU's count of calls by name; absent from NVIDIA's libraries.
CallCount simulated_call_count() {
  return reinterpret_cast<CallCount>(dlsym(RTLD_DEFAULT, "tandem_cudasim_call_count"));
}

// What steps 2..N must not do: every call the simulator counts under these names.
const std::vector<std::string> kNotAfterWarmUp = {
    "cudnnCreateTensorDescriptor",
    "cudnnCreateFilterDescriptor",
    "cudnnCreateConvolutionDescriptor",
    "cudaSetDevice",
    "cudaMalloc",
    "kernel fill_contiguous_kernel<E>",
    "kernel fill_strided_kernel<E, uint32_t>",
    "kernel fill_strided_kernel<E, int64_t>",
};

std::map<std::string, unsigned long long> counts(CallCount count, const std::vector<std::string>& names) {
  std::map<std::string, unsigned long long> out;
  for (const std::string& n : names) out[n] = count(n.c_str());
  return out;
}

void train_steps(bool channels_last) {
  TD_REQUIRE_GPU();
  const CallCount count = simulated_call_count();
  if (count == nullptr) GTEST_SKIP() << "the call counts come from the simulated GPU (tandem_cudasim_call_count)";
  const Device cuda = Device::cuda(0);
  auto spec = parse_model_spec("resnet18:cifar,width=8,classes=10");
  spec.second.seed = tandem::testing::fresh_seed();
  std::shared_ptr<Network> model = make_model(spec.first, spec.second);
  model->to(cuda);
  model->train();
  optim::OptimizerSpec os;
  os.lr = 0.05;
  os.weight_decay = 5e-4;
  auto opt = optim::make_optimizer(os, model->named_parameters(ParamKind::Weight));
  Generator gen(tandem::testing::fresh_seed());
  Tensor x = randn({4, 3, 32, 32}, gen).to(cuda);
  if (channels_last) x = to_channels_last(x);
  const Tensor labels = from_vector<int64_t>({3, 0, 9, 5}, {4}).to(cuda);
  // The loss's gradient given, so that the steps fill nothing themselves: every fill would be the model's.
  const Tensor seed = ones({}, TensorOptions(DType::F32).with_device(cuda));
  auto step = [&] {
    model->zero_grad();
    cross_entropy(model->forward(x), labels).backward(seed);
    opt->step();
  };
  Stream stream = current_stream(cuda);
  step();  // the warm-up: algorithm choices, descriptors, handles, workspaces, optimizer state
  stream.synchronize();

  // Steps 2..kSteps + 1. The pool may still grow in the next steps: step 1 ended with the optimizer's momentum
  // buffers taking blocks its activations had freed, and the pool's best fit then settles (measured here: NCHW
  // grows 13 blocks in step 2, 1 in step 3, none after; channels-last 1 in step 2). From step 4 on every
  // stream-ordered allocation (activations, gradients) must be served from blocks the pool holds ("pool reuse"),
  // none from new memory ("pool growth").
  std::vector<std::string> names = kNotAfterWarmUp;
  for (const char* n : {"cudaMallocFromPoolAsync", "pool reuse", "pool growth"}) names.push_back(n);
  const auto before = counts(count, names);
  MemoryTracker& memory = device_memory(cuda);
  memory.start_recording();
  constexpr int kSteps = 5, kSettling = 2;
  for (int i = 0; i < kSettling; ++i) step();
  stream.synchronize();
  const auto settled = counts(count, names);
  for (int i = kSettling; i < kSteps; ++i) step();
  stream.synchronize();
  const std::vector<MemorySample> samples = memory.stop_recording();
  const auto after = counts(count, names);

  for (const std::string& n : kNotAfterWarmUp)
    EXPECT_EQ(after.at(n) - before.at(n), 0u) << n << " in steps 2.." << kSteps + 1;
  const unsigned long long allocations = after.at("cudaMallocFromPoolAsync") - settled.at("cudaMallocFromPoolAsync");
  EXPECT_GT(allocations, 0u);
  EXPECT_EQ(after.at("pool growth") - settled.at("pool growth"), 0u) << "in steps 4.." << kSteps + 1;
  EXPECT_EQ(after.at("pool reuse") - settled.at("pool reuse"), allocations) << "in steps 4.." << kSteps + 1;
  int workspace = 0;
  for (const MemorySample& s : samples) workspace += s.category == MemoryCategory::Workspace;
  EXPECT_EQ(workspace, 0) << "workspace allocations or frees in steps 2.." << kSteps + 1;

  // The batch norms' counters, kept on the host, read as the steps taken.
  int bns = 0;
  for (const auto& [name, t] : model->named_buffers())
    if (name.size() > 20 && name.compare(name.size() - 20, 20, ".num_batches_tracked") == 0) {
      EXPECT_EQ(t.to(Device::cpu()).item<int64_t>(), kSteps + 1) << name;
      ++bns;
    }
  EXPECT_EQ(bns, 20);  // ResNet-18's batch norms: 2 per block in 8 blocks, 3 shortcuts and the stem
}

TEST(HostWork, StepsAfterTheFirstRepeatNoSetup) { train_steps(false); }
TEST(HostWork, StepsAfterTheFirstRepeatNoSetupChannelsLast) { train_steps(true); }

}  // namespace
}  // namespace models
}  // namespace tandem
