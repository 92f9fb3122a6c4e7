// Checkpoints of device tensors: safetensors written from CUDA tensors are the bytes the same tensors give from
// the host and read back bitwise to CUDA and the CPU, and tools:train interrupted and resumed on the GPU repeats
// the uninterrupted run's losses bit for bit.
#include <gtest/gtest.h>

#include <fstream>
#include <sstream>
#include <vector>

#include "models/checkpoint.h"
#include "models/registry.h"
#include "runtime/base/config.h"
#include "runtime/formats/safetensors.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/models/resume_check.h"
#include "tests/testing.h"
#include "tools/train/trainer.h"

namespace tandem {
namespace {

using tandem::testing::expect_bitwise_equal;

std::string file_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

// Every dtype, on every GPU present, contiguous and as a transposed view.
TEST(GpuCheckpoint, SafetensorsOfDeviceTensorsReadBackBitwise) {
  TD_REQUIRE_GPU();
  Generator gen(tandem::testing::fresh_seed());
  NamedTensors host;
  for (DType t : {DType::F32, DType::F64, DType::F16, DType::BF16})
    host.push_back({dtype_name(t), mul(randn({5, 7}, gen), 100.0).to(t)});
  std::vector<int64_t> ints(35);
  for (int64_t& v : ints) v = static_cast<int64_t>(gen.integer(1u << 31)) - (1 << 30);
  for (DType t : {DType::I64, DType::I32})
    host.push_back({dtype_name(t), from_vector(ints, {5, 7}, Device::cpu()).to(t)});
  for (int64_t& v : ints) v = static_cast<int64_t>(gen.integer(256));
  host.push_back({"u8", from_vector(ints, {5, 7}, Device::cpu()).to(DType::U8)});
  const std::string from_host = ::testing::TempDir() + "gpu_ck_host.safetensors";
  save_safetensors(from_host, host);
  NamedTensors transposed;
  for (auto& [name, t] : host) transposed.push_back({name + ".t", t.t()});
  const std::string from_host_t = ::testing::TempDir() + "gpu_ck_host_t.safetensors";
  save_safetensors(from_host_t, transposed);

  for (int d = 0; d < cuda_device_count() && d < 2; ++d) {
    const Device gpu = Device::cuda(d);
    SCOPED_TRACE(gpu.str());
    NamedTensors on_gpu, on_gpu_t;
    for (auto& [name, t] : host) on_gpu.push_back({name, t.to(gpu)});
    for (auto& [name, t] : on_gpu) on_gpu_t.push_back({name + ".t", t.t()});
    const std::string path = ::testing::TempDir() + "gpu_ck_device.safetensors";
    save_safetensors(path, on_gpu);
    EXPECT_EQ(file_bytes(path), file_bytes(from_host)) << "the file written from " << gpu;
    SafetensorsContents back = load_safetensors(path);
    ASSERT_EQ(back.tensors.size(), host.size());
    for (size_t i = 0; i < host.size(); ++i) {
      EXPECT_TRUE(back.tensors[i].second.device().is_cpu());
      expect_bitwise_equal(back.tensors[i].second, host[i].second, host[i].first + " read to the CPU");
      expect_bitwise_equal(back.tensors[i].second.to(gpu), on_gpu[i].second, host[i].first + " read to the GPU");
    }
    save_safetensors(path, on_gpu_t);
    EXPECT_EQ(file_bytes(path), file_bytes(from_host_t)) << "the file of transposed views written from " << gpu;
  }
}

// As Train.ResumeReproducesTheUninterruptedRunBitwise on the CPU (augmentation, momentum, a warm-up + cosine
// schedule), smaller: a ResNet-18 of width 4 (simulated kernels are slow, and MobileNetV2's many small layers
// take 1.6 s a step; its dropout state is checked on the CPU), 2 epochs of 4 steps. Deterministic mode keeps
// cuDNN's algorithms deterministic, so the same steps give the same bits.
TEST(GpuTrain, ResumeReproducesTheUninterruptedRunBitwise) {
  TD_REQUIRE_GPU();
  tandem::testing::NumericsGuard numerics(allow_tf32(), /*deterministic_mode=*/true);
  train::TrainOptions o;
  o.model = "resnet18:cifar,width=4,classes=3";
  o.dataset = "synthetic:n=32,h=8,w=8,classes=3";
  o.transform = "random-crop:pad=2,flip";
  o.device = "cuda:0";
  o.epochs = 2;
  o.batch = 8;
  o.lr = 0.05;
  o.schedule = "warmup:0.5+cosine";
  o.seed = tandem::testing::fresh_seed() % 1000;
  o.log_every = 0;
  o.evaluate = false;
  const std::string checkpoint = ::testing::TempDir() + "gpu_train_resume.safetensors";
  // The checkpoint, written from the GPU model, loads into a GPU and a CPU model alike.
  const auto loads_on_both = [&] {
    auto spec = models::parse_model_spec(o.model);
    spec.second.in_channels = 3;
    auto on_gpu = models::make_model(spec.first, spec.second), on_cpu = models::make_model(spec.first, spec.second);
    on_gpu->to(Device::cuda(0));
    models::load_weights(checkpoint, *on_gpu);
    models::load_weights(checkpoint, *on_cpu);
    auto sg = on_gpu->state_dict(), sc = on_cpu->state_dict();
    ASSERT_EQ(sg.size(), sc.size());
    for (size_t i = 0; i < sg.size(); ++i) {
      EXPECT_TRUE(sg[i].second.device().is_cuda()) << sg[i].first;
      expect_bitwise_equal(sg[i].second, sc[i].second, sg[i].first);
    }
  };
  tandem::testing::expect_resume_repeats_run(o, checkpoint, 8, loads_on_both);
}

}  // namespace
}  // namespace tandem
