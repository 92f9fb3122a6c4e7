// How the CUDA backend's convolutions use cuDNN (kernels/cudnn): a channels-last pass cuDNN has no algorithm for
// (float64 backward data) runs in NCHW and matches the CPU; the algorithms come from cuDNN's heuristics unless
// benchmark mode asks for its timed search; choices come back from the disk cache in a later run, keyed by the
// GPU, driver and cuDNN version, and one cuDNN no longer runs is not trusted; a data gradient accumulated in place
// (beta = 1) stays the separate add's in benchmark mode and through the NCHW fallback. Skipped without a GPU.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <dlfcn.h>
#include <gtest/gtest.h>

#include <cstdio>
#include <fstream>
#include <regex>
#include <sstream>
#include <string>
#include <vector>

#include "kernels/cudnn/algo_cache.h"
#include "kernels/cudnn/conv_algos.h"
#include "runtime/base/config.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/harness/call_counts.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using cudnn::conv_algo_stats;
using cudnn::ConvAlgoStats;

Device gpu() { return Device::cuda(0); }

// The simulated cuDNN's count of its Find (timed) or heuristic calls; absent from NVIDIA's cuDNN.
using QueryCount = unsigned long long (*)(int);
QueryCount simulated_query_count() {
  return reinterpret_cast<QueryCount>(dlsym(RTLD_DEFAULT, "tandem_cudasim_cudnn_algorithm_queries"));
}

// A disk cache of this test's own (and this process's choices forgotten) while in scope; benchmark mode as given.
class FreshChoices {
 public:
  explicit FreshChoices(bool benchmark)
      : path_(::testing::TempDir() + "cudnn_conv_test_" + std::to_string(testing::fresh_seed()) + ".json"),
        benchmark_(cudnn_benchmark()) {
    cudnn::set_conv_algo_cache_path(path_);
    set_cudnn_benchmark(benchmark);
  }
  ~FreshChoices() {
    set_cudnn_benchmark(benchmark_);
    cudnn::set_conv_algo_cache_path(cudnn::default_algo_cache_path());
  }
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  bool benchmark_;
};

struct Grads {
  Tensor y, dx, dw;
};

// conv2d of x and w (3x3, padding 1) on `device`, x in channels-last when asked, and its backward from dy; all back
// on the CPU.
Grads conv_and_backward(const Tensor& x, const Tensor& w, const Tensor& dy, Device device, bool channels_last) {
  Tensor xd = x.to(device).clone(), wd = w.to(device).clone();
  if (channels_last) xd = to_channels_last(xd);
  xd.set_requires_grad();
  wd.set_requires_grad();
  Conv2dOptions o;
  o.pad_h = o.pad_w = 1;
  Tensor y = conv2d(xd, wd, Tensor(), o);
  y.backward(dy.to(device));
  return {y.to(Device::cpu()), xd.grad().to(Device::cpu()), wd.grad().to(Device::cpu())};
}

// Random input, weight and output gradient of a shape no other test uses (so that no earlier choice is reused).
struct Problem {
  Tensor x, w, dy;
};
Problem fresh_problem(DType dtype, int64_t salt) {
  Generator g(testing::fresh_seed());
  const int64_t n = 2, c = 3 + salt, o = 5, h = 7 + static_cast<int64_t>(testing::fresh_seed() % 5), w = 6;
  return {randn({n, c, h, w}, g, dtype), randn({o, c, 3, 3}, g, dtype), randn({n, o, h, w}, g, dtype)};
}

// x's gradient (x = exp(leaf)) from a 3x3 convolution of x added to that of a scaling of x made after it, whose
// gradient is therefore pending first: with `in_place` the convolution adds into it (cuDNN's beta = 1). Back on
// the CPU, with the binary kernel calls of the backward.
Tensor summed_input_gradient(const Problem& p, bool channels_last, bool in_place, int* binary_calls) {
  const bool was = autograd::inplace_accumulation();
  autograd::set_inplace_accumulation(in_place);
  Tensor leaf = p.x.to(gpu()).clone(), gs = p.x.to(gpu()).clone();
  if (channels_last) leaf = to_channels_last(leaf), gs = to_channels_last(gs);
  leaf.set_requires_grad();
  const Tensor x = exp(leaf);
  Conv2dOptions o;
  o.pad_h = o.pad_w = 1;
  const Tensor y = conv2d(x, p.w.to(gpu()), Tensor(), o), s = mul(x, 3.0);
  {
    testing::CallCounts calls(DeviceType::CUDA);
    autograd::backward({y, s}, {p.dy.to(gpu()), gs});
    *binary_calls = calls.of("binary");
  }
  autograd::set_inplace_accumulation(was);
  return leaf.grad().to(Device::cpu());
}

// A data gradient added in place into a pending one, in benchmark mode (whose timed search must run on scratch,
// not on that buffer) and through the NCHW fallback (float64 channels-last, whose NCHW copy must start from the
// pending values): bitwise the separate add's sum, with one add kernel fewer.
TEST(CudnnConv, AccumulatedDataGradientInBenchmarkModeAndTheNchwFallback) {
  TD_REQUIRE_GPU();
  testing::NumericsGuard numerics(false, true);
  struct Case {
    DType dtype;
    bool channels_last, benchmark;
    int64_t salt;
  };
  for (const Case c : {Case{DType::F32, false, true, 6}, Case{DType::F64, true, false, 7}}) {
    SCOPED_TRACE(std::string(dtype_name(c.dtype)) + (c.benchmark ? " benchmark" : " NCHW fallback"));
    FreshChoices fresh(c.benchmark);
    const Problem p = fresh_problem(c.dtype, c.salt);
    const ConvAlgoStats before = conv_algo_stats();
    int on_calls = 0, off_calls = 0;
    const Tensor on = summed_input_gradient(p, c.channels_last, true, &on_calls);  // first: the choice is made here
    if (c.channels_last) EXPECT_GE(conv_algo_stats().fallbacks, before.fallbacks + 1);
    const Tensor off = summed_input_gradient(p, c.channels_last, false, &off_calls);
    testing::expect_bitwise_equal(on, off, "input gradient");
    EXPECT_EQ(off_calls - on_calls, 1);
  }
}

// cuDNN (9.19 on an H200, and its support tables) offers no float64 backward data algorithm for channels-last
// tensors: that pass runs in NCHW through layout copies, and its results match the CPU's.
TEST(CudnnConv, Float64ChannelsLastBackwardRunsInNchwAndMatchesTheCpu) {
  TD_REQUIRE_GPU();
  testing::NumericsGuard numerics(false, false);
  FreshChoices fresh(false);
  for (int64_t salt = 0; salt < 3; ++salt) {
    const Problem p = fresh_problem(DType::F64, salt);
    const ConvAlgoStats before = conv_algo_stats();
    const Grads got = conv_and_backward(p.x, p.w, p.dy, gpu(), true);
    EXPECT_GE(conv_algo_stats().fallbacks, before.fallbacks + 1) << "backward data did not take the NCHW path";
    const Grads want = conv_and_backward(p.x, p.w, p.dy, Device::cpu(), true);
    testing::expect_close(got.y, want.y, 1e-12, "output");
    testing::expect_close(got.dx, want.dx, 1e-12, "input gradient");
    testing::expect_close(got.dw, want.dw, 1e-12, "weight gradient");
  }
  // float32 in channels-last has its own algorithms: no fallback.
  const Problem p = fresh_problem(DType::F32, 3);
  const ConvAlgoStats before = conv_algo_stats();
  conv_and_backward(p.x, p.w, p.dy, gpu(), true);
  EXPECT_EQ(conv_algo_stats().fallbacks, before.fallbacks);
}

// By default each pass's algorithm comes from cuDNN's heuristics: no timed search runs. In benchmark mode the
// search does, once per pass and shape.
TEST(CudnnConv, HeuristicsByDefaultAndTheSearchOnlyInBenchmarkMode) {
  TD_REQUIRE_GPU();
  testing::NumericsGuard numerics(false, false);
  const QueryCount simulated = simulated_query_count();
  for (bool benchmark : {false, true}) {
    FreshChoices fresh(benchmark);
    const Problem p = fresh_problem(DType::F32, benchmark ? 5 : 4);
    const ConvAlgoStats before = conv_algo_stats();
    const unsigned long long finds = simulated ? simulated(1) : 0, heuristics = simulated ? simulated(0) : 0;
    const Grads got = conv_and_backward(p.x, p.w, p.dy, gpu(), false);
    const ConvAlgoStats after = conv_algo_stats();
    // Three passes: forward, backward data, backward weight.
    EXPECT_EQ(after.heuristic - before.heuristic, benchmark ? 0 : 3) << "benchmark " << benchmark;
    EXPECT_EQ(after.searched - before.searched, benchmark ? 3 : 0) << "benchmark " << benchmark;
    if (simulated != nullptr) {  // what cuDNN itself was asked
      EXPECT_EQ(simulated(1) - finds, benchmark ? 3u : 0u) << "cudnnFind*AlgorithmEx calls, benchmark " << benchmark;
      EXPECT_EQ(simulated(0) - heuristics, benchmark ? 0u : 3u) << "heuristic calls, benchmark " << benchmark;
    }
    // The same shape again: no more questions.
    conv_and_backward(p.x, p.w, p.dy, gpu(), false);
    EXPECT_EQ(conv_algo_stats().heuristic + conv_algo_stats().searched, after.heuristic + after.searched);
    const Grads want = conv_and_backward(p.x, p.w, p.dy, Device::cpu(), false);
    testing::expect_close(got.y, want.y, 1e-5, "output");
    testing::expect_close(got.dx, want.dx, 1e-5, "input gradient");
    testing::expect_close(got.dw, want.dw, 1e-5, "weight gradient");
  }
}

// The passes and shapes asked for an algorithm are kept with how often each was asked: a convolution's forward and
// backward, run k times, are three entries of k calls each, with the convolution's geometry.
TEST(CudnnConv, KeepsThePassesAndShapesItRan) {
  TD_REQUIRE_GPU();
  FreshChoices fresh(false);
  const Problem p = fresh_problem(DType::F32, 6);
  const int runs = 1 + static_cast<int>(testing::fresh_seed() % 3);
  for (int i = 0; i < runs; ++i) conv_and_backward(p.x, p.w, p.dy, gpu(), false);
  const std::vector<cudnn::SeenConv> seen = cudnn::conv_problems_seen();
  ASSERT_EQ(seen.size(), 3u);
  for (size_t i = 0; i < 3; ++i) {
    EXPECT_EQ(seen[i].calls, runs) << i;
    const Conv2dGeometry& g = seen[i].g;
    EXPECT_EQ(g.n, p.x.shape()[0]);
    EXPECT_EQ(g.c, p.x.shape()[1]);
    EXPECT_EQ(g.h, p.x.shape()[2]);
    EXPECT_EQ(g.w, p.x.shape()[3]);
    EXPECT_EQ(g.o, p.w.shape()[0]);
    EXPECT_EQ(g.kh, 3);
    EXPECT_EQ(g.oh, p.x.shape()[2]);  // 3x3, padding 1, stride 1
    EXPECT_FALSE(g.channels_last);
  }
  // Forward comes first; the backward passes run in the order autograd takes them.
  EXPECT_EQ(seen[0].pass, cudnn::ConvPass::Forward);
  EXPECT_NE(seen[1].pass, seen[2].pass);
  EXPECT_NE(seen[1].pass, cudnn::ConvPass::Forward);
  EXPECT_NE(seen[2].pass, cudnn::ConvPass::Forward);
}

std::string read_file(const std::string& path) {
  std::ifstream f(path);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

// A later run finds the choices on disk, under the GPU's name, the driver's version and cuDNN's, and asks cuDNN
// nothing; a stored choice cuDNN does not run (another build's, a damaged file's) is asked for again.
TEST(CudnnConv, ChoicesComeBackFromDiskInALaterRun) {
  TD_REQUIRE_GPU();
  testing::NumericsGuard numerics(false, false);
  FreshChoices fresh(false);
  const Problem p = fresh_problem(DType::F32, 6);
  const Grads first = conv_and_backward(p.x, p.w, p.dy, gpu(), false);
  const std::string text = read_file(fresh.path());
  cudaDeviceProp prop{};
  ASSERT_EQ(cudaGetDeviceProperties(&prop, 0), cudaSuccess);
  int driver = 0;
  ASSERT_EQ(cudaDriverGetVersion(&driver), cudaSuccess);
  const std::string context = std::string(prop.name) + " | driver " + std::to_string(driver) + " | cuDNN " +
                              std::to_string(cudnnGetVersion()) + " | ";
  for (const char* pass : {"forward", "backward data", "backward weight"})
    EXPECT_NE(text.find(context + pass + ", heuristic"), std::string::npos) << pass << " in\n" << text;

  // A later run (this process's choices forgotten, the same file).
  cudnn::set_conv_algo_cache_path(fresh.path());
  ConvAlgoStats before = conv_algo_stats();
  const Grads again = conv_and_backward(p.x, p.w, p.dy, gpu(), false);
  ConvAlgoStats after = conv_algo_stats();
  EXPECT_EQ(after.from_disk - before.from_disk, 3);
  EXPECT_EQ(after.heuristic - before.heuristic, 0);
  testing::expect_bitwise_equal(again.y, first.y, "output with the same algorithm");

  // Every stored algorithm number made one cuDNN has not: not trusted, asked again, the results still right.
  std::ofstream(fresh.path()) << std::regex_replace(text, std::regex("\"algo\": [0-9]+"), "\"algo\": 97");
  cudnn::set_conv_algo_cache_path(fresh.path());
  before = conv_algo_stats();
  const Grads redone = conv_and_backward(p.x, p.w, p.dy, gpu(), false);
  after = conv_algo_stats();
  EXPECT_EQ(after.from_disk - before.from_disk, 0);
  EXPECT_EQ(after.heuristic - before.heuristic, 3);
  const Grads want = conv_and_backward(p.x, p.w, p.dy, Device::cpu(), false);
  testing::expect_close(redone.y, want.y, 1e-5, "output");
  testing::expect_close(redone.dx, want.dx, 1e-5, "input gradient");
}

}  // namespace
}  // namespace tandem
