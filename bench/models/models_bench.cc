// Training and inference throughput of zoo models (ResNet-18, ResNet-50, MobileNetV2; torchvision's ImageNet
// architectures, 1000 classes) in images/s, per mode:
//   fwd       forward in eval mode without autograd
//   fwd_bwd   forward in training mode, cross-entropy, backward
//   step      fwd_bwd plus an SGD step (momentum 0.9, weight decay 5e-4)
// on the best device: batch 256 at 32x32 and 224x224 on a GPU (channels-last inputs, f32 with TF32 as the
// runtime is set), batch 8 at 32x32 on the CPU. Prints a table at the end; --benchmark_out=FILE.json writes
// Google Benchmark's JSON, which bench/torch/speed.py reads to time the same cases in PyTorch.
//
// Own flags (before Google Benchmark's): --device=cpu|cuda[:N]  --batch=N  --sizes=32,224
//   --models=resnet18,resnet50,mobilenet_v2  --modes=fwd,fwd_bwd,step  --nchw (NCHW inputs on the GPU)
//   --min-time=S (timed seconds per case at least, default 1: on the CPU, 0.2 s timed one or two iterations of
//   ResNet-18 at batch 8, too few on a shared machine for a stable figure; its step measured above its fwd_bwd)
#include <benchmark/benchmark.h>

#include <chrono>
#include <cstdio>
#include <memory>
#include <string>
#include <vector>

#include "models/losses.h"
#include "models/registry.h"
#include "runtime/base/config.h"
#include "runtime/base/device.h"
#include "runtime/base/parallel_for.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/memory/stream.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/optim/optim.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

struct Config {
  Device device = best_device();
  int64_t batch = 0;  // 0: 256 on a GPU, 8 on the CPU
  std::vector<int64_t> sizes;
  std::vector<std::string> models = {"resnet18", "resnet50", "mobilenet_v2"};
  std::vector<std::string> modes = {"fwd", "fwd_bwd", "step"};
  bool channels_last = true;
  bool cuda_graph = false;
  double min_time_s = 1.0;
};
Config g_config;

struct Result {
  std::string model, mode;
  int64_t size, batch;
  double ms_per_iter, images_per_s;
};
std::vector<Result> g_results;

// One timed unit of work for a model, mode, size and batch.
struct Case {
  std::shared_ptr<models::Network> model;
  std::unique_ptr<optim::Sgd> optimizer;
  Tensor images, labels;
  std::string mode;
  CudaGraph graph;  // --cuda-graph: run() captured after the warm-up, replayed by every iteration

  void run() {
    if (mode == "fwd") {
      autograd::NoGradGuard ng;
      model->forward(images);
      return;
    }
    optimizer->zero_grad(!g_config.cuda_graph);  // a graph accumulates into the same gradients
    models::cross_entropy(model->forward(images), labels).backward();
    if (mode == "step") optimizer->step();
  }
};

void BM_Model(benchmark::State& state, std::string name, int64_t size, std::string mode) {
  const Config& c = g_config;
  const int64_t batch = c.batch > 0 ? c.batch : (c.device.is_cuda() ? 256 : 8);
  DeviceGuard dg(c.device);
  Case k;
  k.mode = mode;
  models::ModelOptions o;
  o.seed = 1;
  k.model = models::make_model(name, o);
  k.model->to(c.device);
  if (c.device.is_cuda() && c.channels_last) k.model->to_channels_last();
  k.model->train(mode != "fwd");
  optim::SgdOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  so.weight_decay = 5e-4;
  k.optimizer = std::make_unique<optim::Sgd>(optim::single_group(k.model->named_parameters()), so);
  Generator gen(2);
  k.images = randn({batch, 3, size, size}, gen).to(c.device);
  if (c.device.is_cuda() && c.channels_last) k.images = to_channels_last(k.images);
  std::vector<int64_t> labels(batch);
  for (auto& l : labels) l = static_cast<int64_t>(gen.integer(1000));
  k.labels = from_vector<int64_t>(labels, {batch}).to(c.device);

  Stream s = current_stream(c.device);
  for (int i = 0; i < 3; ++i) k.run();  // warm-up: algorithm selection, allocator pools
  if (c.cuda_graph && c.device.is_cuda()) {
    k.graph.capture(s, [&] { k.run(); });
    state.counters["graph_nodes"] = static_cast<double>(k.graph.nodes());
  }
  auto iteration = [&] {
    if (k.graph.captured())
      k.graph.replay();
    else
      k.run();
  };
  s.synchronize();
  double total_s = 0;
  for (auto _ : state) {
    if (c.device.is_cuda()) {
      Event start(true), stop(true);
      start.record(s);
      iteration();
      stop.record(s);
      stop.synchronize();
      double sec = start.elapsed_ms(stop) * 1e-3;
      state.SetIterationTime(sec);
      total_s += sec;
    } else {
      auto t0 = std::chrono::steady_clock::now();
      iteration();
      double sec = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
      state.SetIterationTime(sec);
      total_s += sec;
    }
  }
  const double iters = static_cast<double>(state.iterations());
  state.SetItemsProcessed(static_cast<int64_t>(iters) * batch);
  state.counters["batch"] = static_cast<double>(batch);
  state.counters["size"] = static_cast<double>(size);
  state.counters["images_per_s"] = iters * static_cast<double>(batch) / total_s;
  // Google Benchmark may call this more than once per case (a trial run first): keep the last.
  Result r{name, mode, size, batch, 1e3 * total_s / iters, iters * batch / total_s};
  for (Result& old : g_results)
    if (old.model == name && old.mode == mode && old.size == size) {
      old = r;
      return;
    }
  g_results.push_back(r);
}

void print_table() {
  std::printf("\n%-14s %6s %6s %-8s %12s %12s\n", "model", "size", "batch", "mode", "ms/iter", "images/s");
  for (const Result& r : g_results)
    std::printf("%-14s %6lld %6lld %-8s %12.2f %12.1f\n", r.model.c_str(), static_cast<long long>(r.size),
                static_cast<long long>(r.batch), r.mode.c_str(), r.ms_per_iter, r.images_per_s);
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  using tandem::g_config;
  tandem::flags::Parser p(
      "models_bench",
      "models_bench [--device=DEV] [--batch=N] [--sizes=32,224] [--models=A,B] [--modes=M,...] [--nchw]\n"
      "                    [--min-time=S] [Google Benchmark flags]",
      "Images/s of zoo models (default resnet18,resnet50,mobilenet_v2) per mode: fwd (eval forward, no\n"
      "autograd), fwd_bwd (training forward, cross-entropy, backward), step (fwd_bwd + SGD step).\n"
      "--benchmark_out=FILE.json feeds bench/torch/speed.py, which times the same cases in PyTorch\n"
      "(tools/tandem bench-cpu: both side by side on the CPU).");
  p.custom(
      "--device", "DEV", [](const std::string& v) { g_config.device = tandem::Device::parse(v); },
      "the best device by default (GPU: batch 256 at 32x32 and 224x224, channels-last\n"
      "unless --nchw; CPU: batch 8 at 32x32)");
  p.integer("--batch", "N", &g_config.batch, "batch (default: by device, as above)", 0);
  p.integers("--sizes", "LIST", &g_config.sizes, "input sizes (default: by device, as above)", 1);
  p.words("--models", "A,B", &g_config.models, "zoo models (default resnet18,resnet50,mobilenet_v2)");
  p.words("--modes", "M,...", &g_config.modes, "fwd, fwd_bwd, step (default all three)");
  p.flag("--nchw", &g_config.channels_last, false, "NCHW inputs on the GPU");
  p.flag("--cuda-graph", &g_config.cuda_graph, true,
         "on a GPU: capture each case's iteration as a CUDA graph after the warm-up and time its replays");
  p.number("--min-time", "S", &g_config.min_time_s, "timed seconds per case at least (default 1; 0: one iteration)", 0);
  p.footer("Google Benchmark's flags follow.");
  std::vector<std::string> rest_args = p.parse_known(argc, argv, [&] {
    char* help[] = {argv[0], const_cast<char*>("--help")};
    int n = 2;
    benchmark::Initialize(&n, help);  // prints its flags and exits
  });
  // A missing device (or any error while the cases run) ends with "models_bench: what went wrong", exit 1:
  // an exception escaping a benchmark function would otherwise pass through Google Benchmark and abort.
  return tandem::flags::run_reporting_errors("models_bench", [&] {
    tandem::check_device_available(g_config.device);
    std::vector<char*> rest{argv[0]};
    for (std::string& a : rest_args) rest.push_back(&a[0]);
    if (g_config.sizes.empty())
      g_config.sizes = g_config.device.is_cuda() ? std::vector<int64_t>{32, 224} : std::vector<int64_t>{32};
    int rest_argc = static_cast<int>(rest.size());
    benchmark::Initialize(&rest_argc, rest.data());
    benchmark::AddCustomContext("tandem_device", g_config.device.str());
    benchmark::AddCustomContext("tandem_tf32", tandem::allow_tf32() ? "1" : "0");
    benchmark::AddCustomContext("tandem_channels_last",
                                g_config.device.is_cuda() && g_config.channels_last ? "1" : "0");
    benchmark::AddCustomContext("tandem_dtype", "f32");
    benchmark::AddCustomContext("tandem_threads", std::to_string(tandem::intra_op_threads()));
    benchmark::AddCustomContext("tandem_min_time", std::to_string(g_config.min_time_s));
    for (const auto& m : g_config.models)
      for (int64_t size : g_config.sizes)
        for (const auto& mode : g_config.modes) {
          auto* b = benchmark::RegisterBenchmark((m + "/" + std::to_string(size) + "/" + mode).c_str(),
                                                 tandem::BM_Model, m, size, mode)
                        ->UseManualTime()
                        ->Unit(benchmark::kMillisecond);
          // Google Benchmark aborts on a minimum time of 0.
          if (g_config.min_time_s > 0)
            b->MinTime(g_config.min_time_s);
          else
            b->Iterations(1);
        }
    benchmark::RunSpecifiedBenchmarks();
    tandem::print_table();
    benchmark::Shutdown();
    return 0;
  });
}
