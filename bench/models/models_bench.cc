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
//   --profile (after each case's warm-up, one iteration under the kernel profiler: its op and kernel tables)
//   --profile-trace=DIR (implies --profile: each case's Chrome trace as DIR/MODEL-SIZE-MODE.json)
//   --predict=h100|h200 [--predict-json=FILE]: instead of timing, the cost model's prediction of each case on
//   that GPU (per op and per step), from ops recorded on the simulated GPU (tools/costmodel); the JSON also has
//   each case's prediction per profiler op (conv2d, batch_norm_act backward, ...).
//   --compare-predictions=FILE (implies --profile): beside each profiled case's op table, the predicted ms of
//   the same ops from FILE (--predict-json's, written on the simulated GPU) and measured / predicted.
//   --no-bn-fusion (batch norm, residual add and ReLU as separate ops, to compare with the fused batch_norm_act)
//   --precision=f32|bf16 (the precision policy of runtime/tensor/precision.h; default f32)
//   --cuda-graph (on a GPU: each case's iteration captured as a CUDA graph after the warm-up, its replays timed)
//   --cudnn-benchmark (cuDNN's convolution algorithms by timing them all, as PyTorch's cudnn.benchmark)
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include <cstdlib>
#include <nlohmann/json.hpp>

#include "models/layers.h"
#include "runtime/base/config.h"
#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/base/parallel_for.h"
#include "runtime/formats/chrome_trace.h"
#include "runtime/formats/json.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/precision.h"
#include "runtime/tensor/profile_table.h"
#include "runtime/tensor/profiler.h"
#include "tools/costmodel/model.h"
#include "tools/costmodel/model_step.h"
#include "tools/costmodel/profile_compare.h"
#include "tools/costmodel/record.h"
#include "tools/costmodel/report.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

struct Config {
  std::string device;  // "": the best device
  int64_t batch = 0;   // 0: 256 on a GPU, 8 on the CPU
  std::vector<int64_t> sizes;
  std::vector<std::string> models = {"resnet18", "resnet50", "mobilenet_v2"};
  std::vector<std::string> modes = {"fwd", "fwd_bwd", "step"};
  bool channels_last = true;
  bool cuda_graph = false;
  double min_time_s = 1.0;
  bool profile = false;
  std::string profile_trace;  // a folder; empty: no traces (set: profile)
  std::string predict;        // a modelled GPU: predict instead of timing
  std::string predict_json;
  std::string compare_predictions;  // --predict-json's file, for predicted beside measured (set: profile)
  bool bn_fusion = true;
  bool cudnn_benchmark = false;
  Precision precision = Precision::F32;
};
Config g_config;
Device g_device = Device::cpu();
Json g_predictions;  // --compare-predictions's file

struct Result {
  std::string model, mode;
  int64_t size, batch;
  double ms_per_iter, images_per_s;
};
std::vector<Result> g_results;

int64_t batch_of(const Config& c) { return c.batch > 0 ? c.batch : (g_device.is_cuda() ? 256 : 8); }

// --compare-predictions: the profile's op rows beside the file's predictions for the same case and batch.
void compare_with_predictions(const profiler::Profile& p, const std::string& name) {
  const int64_t batch = batch_of(g_config);
  for (const Json& e : json_array(g_predictions, g_config.compare_predictions)) {
    const std::string id = json_string(json_at(e, "model"), "model") + "/" +
                           std::to_string(json_int(json_at(e, "size"), "size")) + "/" +
                           json_string(json_at(e, "mode"), "mode");
    if (id != name || json_int(json_at(e, "batch"), "batch") != batch) continue;
    const std::string gpu = json_string(json_at(e, "gpu"), "gpu");
    const auto predicted = costmodel::op_scope_predictions_from_json(json_at(e, "by_op"));
    std::printf("\nmeasured (timed by %s) beside PREDICTED by the cost model for %s (%s):\n", p.timer.c_str(),
                gpu.c_str(), g_config.compare_predictions.c_str());
    std::fputs(costmodel::compared_table(costmodel::join_by_op(profiler::op_rows(p), predicted), gpu, 30).c_str(),
               stdout);
    return;
  }
  std::printf("\n%s has no prediction of %s at batch %lld\n", g_config.compare_predictions.c_str(), name.c_str(),
              static_cast<long long>(batch));
}

// One iteration of `k` under the profiler: its tables on stdout, its trace in --profile-trace's folder. Once per case
// (Google Benchmark may run a case more than once).
void profile_case(costmodel::ModelStep& k, const std::string& name) {
  static std::set<std::string> profiled;
  if (!profiled.insert(name).second) return;
  profiler::start({g_device});
  k.run();
  profiler::Profile p = profiler::stop();
  std::printf("\n%s\n", name.c_str());
  std::fputs(profiler::format_table(p, 30).c_str(), stdout);
  if (!g_config.compare_predictions.empty()) compare_with_predictions(p, name);
  if (!g_config.profile_trace.empty()) {
    make_dirs(g_config.profile_trace);
    std::string file = name;
    for (char& ch : file)
      if (ch == '/') ch = '-';
    write_chrome_trace(p, g_config.profile_trace + "/" + file + ".json");
  }
}

void BM_Model(benchmark::State& state, std::string name, int64_t size, std::string mode) {
  const Config& c = g_config;
  const int64_t batch = batch_of(c);
  const Device device = g_device;
  DeviceGuard dg(device);
  PrecisionGuard policy(c.precision);
  costmodel::ModelStep k(name, mode, device, c.channels_last);
  k.set_inputs(batch, size);

  Stream s = current_stream(device);
  const bool graphed = c.cuda_graph && device.is_cuda();
  for (int i = 0; i < 3; ++i) k.run(graphed);  // warm-up: algorithm selection, allocator pools
  s.synchronize();
  if (c.profile || !c.profile_trace.empty() || !c.compare_predictions.empty())
    profile_case(k, name + "/" + std::to_string(size) + "/" + mode);
  // --cuda-graph: the iteration captured once after the warm-up, then replayed.
  CudaGraph graph;
  if (graphed) {
    graph.capture(s, [&] { k.run(true); });
    state.counters["graph_nodes"] = static_cast<double>(graph.nodes());
  }
  auto iteration = [&] {
    if (graph.captured())
      graph.replay();
    else
      k.run();
  };
  double total_s = 0;
  for (auto _ : state) {
    if (device.is_cuda()) {
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

// --predict: each case's ops recorded on the simulated GPU and predicted on the modelled GPU, per op and per
// step, with JSON (per kernel and per profiler op) for --compare-predictions to put beside a measured profile.
int predict_all(const std::vector<std::string>& cases) {
  const Config& c = g_config;
  const costmodel::GpuSpec& gpu = costmodel::gpu_spec(c.predict);
  TD_CHECK(costmodel::counters_available(), "--predict: ", costmodel::counters_unavailable_reason());
  std::printf(
      "PREDICTIONS for %s by the cost model (tools/costmodel), not measurements: each case's ops are recorded on\n"
      "the simulated GPU at batches 1 and 2 (2 and 4 below 64x64; cuDNN and cuBLAS skip their arithmetic),\n"
      "extrapolated to batch %lld\n"
      "and timed by the model with the constants fitted to the measured runs of tools/costmodel/calibration.json.\n",
      gpu.title.c_str(), static_cast<long long>(batch_of(c)));
  Json out = Json::array();
  std::vector<Result> summary;
  PrecisionGuard policy(c.precision);
  for (const std::string& id : cases) {
    const size_t a = id.find('/'), b = id.rfind('/');
    costmodel::StepSpec spec;
    spec.model = id.substr(0, a);
    spec.size = std::stoll(id.substr(a + 1, b - a - 1));
    spec.mode = id.substr(b + 1);
    spec.batch = batch_of(c);
    spec.channels_last = c.channels_last;
    std::fprintf(stderr, "models_bench: recording %s\n", spec.label().c_str());
    // Recorded at batches 1 and 2, or 2 and 4 for small inputs, whose last batch norm would see one value a
    // channel at batch 1 (ResNets at 32x32).
    const int64_t small = spec.size >= 64 ? 1 : 2;
    const costmodel::OpsByOp by_op = costmodel::record_model_step_by_op(spec, small);
    const std::vector<costmodel::OpCounts> ops = costmodel::all_ops(by_op);
    const std::vector<costmodel::OpPrediction> rows = costmodel::predict_ops(ops, gpu, costmodel::fitted_constants());
    const double gpu_s = costmodel::total_seconds(rows);
    // A replayed graph costs the host two calls (the replay values' copy and cudaGraphLaunch), whatever its nodes;
    // the GPU runs the same kernels (each with its launch floor).
    const double host_s = c.cuda_graph ? 2 * costmodel::fitted_constants().host_op_s
                                       : costmodel::host_seconds(ops, costmodel::fitted_constants());
    const double step_s = std::max(gpu_s, host_s);
    std::printf("\n== %s on %s (predicted%s)\n%s", spec.label().c_str(), gpu.name.c_str(),
                c.cuda_graph ? ", replayed from a CUDA graph" : "", costmodel::prediction_table(rows, 15).c_str());
    std::printf("step: %.2f ms, %.1f images/s (predicted): the longer of the GPU's %.2f ms and the host's %.2f ms%s\n",
                step_s * 1e3, spec.batch / step_s, gpu_s * 1e3, host_s * 1e3,
                c.cuda_graph ? " (one graph launch)" : "");
    summary.push_back({spec.model, spec.mode, spec.size, spec.batch, step_s * 1e3, spec.batch / step_s});
    Json e = Json::object();
    e["model"] = spec.model;
    e["size"] = spec.size;
    e["batch"] = spec.batch;
    e["mode"] = spec.mode;
    e["gpu"] = gpu.name;
    e["predicted_s"] = step_s;
    e["cuda_graph"] = c.cuda_graph;
    e["images_per_s"] = spec.batch / step_s;
    e["ops"] = costmodel::predictions_json(rows);
    e["by_op"] =
        costmodel::op_scope_predictions_json(costmodel::predict_by_op(by_op, gpu, costmodel::fitted_constants()));
    out.push_back(e);
  }
  std::printf("\npredicted on %s:\n%-14s %6s %6s %-8s %12s %12s\n", gpu.name.c_str(), "model", "size", "batch", "mode",
              "pred_ms", "pred_img/s");
  for (const Result& r : summary)
    std::printf("%-14s %6lld %6lld %-8s %12.2f %12.1f\n", r.model.c_str(), static_cast<long long>(r.size),
                static_cast<long long>(r.batch), r.mode.c_str(), r.ms_per_iter, r.images_per_s);
  if (!c.predict_json.empty()) {
    write_text(c.predict_json, dump_json(out, 1));
    std::printf("wrote %s\n", c.predict_json.c_str());
  }
  return 0;
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
      "                    [--min-time=S] [--cuda-graph] [--precision=P] [--no-bn-fusion]\n"
      "                    [--profile [--profile-trace=DIR] [--compare-predictions=FILE]]\n"
      "                    [--predict=GPU [--predict-json=FILE]] [Google Benchmark flags]",
      "Images/s of zoo models (default resnet18,resnet50,mobilenet_v2) per mode: fwd (eval forward, no\n"
      "autograd), fwd_bwd (training forward, cross-entropy, backward), step (fwd_bwd + SGD step).\n"
      "--benchmark_out=FILE.json feeds bench/torch/speed.py, which times the same cases in PyTorch\n"
      "(tools/tandem bench-cpu: both side by side on the CPU).");
  p.custom(
      "--device", "DEV", [](const std::string& v) { g_config.device = tandem::Device::parse(v).str(); },
      "the best device by default (GPU: batch 256 at 32x32 and 224x224, channels-last\n"
      "unless --nchw; CPU: batch 8 at 32x32)");
  p.integer("--batch", "N", &g_config.batch, "batch (default: by device, as above)", 0);
  p.integers("--sizes", "LIST", &g_config.sizes, "input sizes (default: by device, as above)", 1);
  p.words("--models", "A,B", &g_config.models, "zoo models (default resnet18,resnet50,mobilenet_v2)");
  p.words("--modes", "M,...", &g_config.modes, "fwd, fwd_bwd, step (default all three)");
  p.flag("--nchw", &g_config.channels_last, false, "NCHW inputs on the GPU");
  p.flag("--cuda-graph", &g_config.cuda_graph, true,
         "on a GPU: capture each case's iteration as a CUDA graph after the warm-up and time its replays\n"
         "(with --predict: the host's time is one replay's, not one launch per op)");
  p.number("--min-time", "S", &g_config.min_time_s, "timed seconds per case at least (default 1; 0: one iteration)", 0);
  p.flag("--profile", &g_config.profile, true,
         "after each case's warm-up, profile one iteration: time per op and per kernel\n"
         "(CUPTI on a GPU when libcupti loads, else host timers around each kernel)");
  p.text("--profile-trace", "DIR", &g_config.profile_trace,
         "write each case's profile as a Chrome trace (chrome://tracing, Perfetto) to DIR\n"
         "(implies --profile)");
  p.custom(
      "--predict", "GPU", [](const std::string& v) { g_config.predict = tandem::costmodel::gpu_spec(v).name; },
      "h100 or h200: print the cost model's prediction of each case on that GPU (per op and\n"
      "per step) instead of timing it; needs the simulated GPU (--config=cudasim, tools/tandem sim)\n"
      "and takes the GPU defaults (batch 256, sizes 32 and 224)");
  p.text("--predict-json", "FILE", &g_config.predict_json,
         "with --predict: write the predictions as JSON (per kernel, per profiler op and per step)");
  p.text("--compare-predictions", "FILE", &g_config.compare_predictions,
         "profile each case (implies --profile) and print its op table beside the predicted ms of\n"
         "the same ops (and measured / predicted) from FILE, written by --predict-json on the\n"
         "simulated GPU for the same cases and batch (a GPU run: the GPU defaults, or the same --batch)");
  p.custom(
      "--precision", "P", [](const std::string& v) { g_config.precision = tandem::parse_precision(v); },
      "f32 (default; TF32 convolutions on the GPU) or bf16 (runtime/tensor/precision.h)");
  p.flag("--no-bn-fusion", &g_config.bn_fusion, false,
         "batch norm, residual add and ReLU as separate ops (default: fused, batch_norm_act)");
  p.flag("--cudnn-benchmark", &g_config.cudnn_benchmark, true,
         "choose cuDNN convolution algorithms by timing them all (as TANDEM_CUDNN_BENCHMARK=1 and\n"
         "PyTorch's cudnn.benchmark; the JSON's tandem_cudnn_benchmark says which ran); default:\n"
         "cuDNN's heuristics");
  p.footer("Google Benchmark's flags follow.");
  std::vector<std::string> rest_args = p.parse_known(argc, argv, [&] {
    char* help[] = {argv[0], const_cast<char*>("--help")};
    int n = 2;
    benchmark::Initialize(&n, help);  // prints its flags and exits
  });
  std::vector<char*> rest{argv[0]};
  for (std::string& a : rest_args) rest.push_back(&a[0]);
  tandem::models::set_batch_norm_fusion(g_config.bn_fusion);
  if (g_config.cudnn_benchmark) tandem::set_cudnn_benchmark(true);
  if (!g_config.predict.empty()) {
    // Launches shaped as on an H100 or H200 (132 SMs), before anything asks the simulated GPU.
    setenv("TANDEM_CUDASIM_SMS", "132", 0);
    return tandem::flags::run_reporting_errors("models_bench", [&] {
      TD_CHECK_T(ValueError, g_config.compare_predictions.empty(),
                 "--compare-predictions compares with a measured profile: run it without --predict");
      tandem::g_device = g_config.device.empty() ? tandem::Device::cuda(0) : tandem::Device::parse(g_config.device);
      if (g_config.sizes.empty()) g_config.sizes = {32, 224};
      std::vector<std::string> cases;
      for (const auto& m : g_config.models)
        for (int64_t size : g_config.sizes)
          for (const auto& mode : g_config.modes) cases.push_back(m + "/" + std::to_string(size) + "/" + mode);
      return tandem::predict_all(cases);
    });
  }
  // A missing device (or any error while the cases run) ends with "models_bench: what went wrong", exit 1:
  // an exception escaping a benchmark function would otherwise pass through Google Benchmark and abort.
  return tandem::flags::run_reporting_errors("models_bench", [&] {
    tandem::g_device = g_config.device.empty() ? tandem::best_device() : tandem::Device::parse(g_config.device);
    tandem::check_device_available(tandem::g_device);
    if (!g_config.compare_predictions.empty()) {
      tandem::g_predictions = tandem::parse_json(tandem::read_text(g_config.compare_predictions));
      tandem::json_array(tandem::g_predictions, g_config.compare_predictions + " (--predict-json's cases)");
    }
    if (g_config.sizes.empty())
      g_config.sizes = tandem::g_device.is_cuda() ? std::vector<int64_t>{32, 224} : std::vector<int64_t>{32};
    int rest_argc = static_cast<int>(rest.size());
    benchmark::Initialize(&rest_argc, rest.data());
    benchmark::AddCustomContext("tandem_device", tandem::g_device.str());
    benchmark::AddCustomContext("tandem_tf32", tandem::allow_tf32() ? "1" : "0");
    benchmark::AddCustomContext("tandem_channels_last",
                                tandem::g_device.is_cuda() && g_config.channels_last ? "1" : "0");
    benchmark::AddCustomContext("tandem_dtype", tandem::precision_name(g_config.precision));
    std::printf("precision: %s\n", tandem::precision_summary(g_config.precision, tandem::g_device).c_str());
    benchmark::AddCustomContext("tandem_threads", std::to_string(tandem::intra_op_threads()));
    benchmark::AddCustomContext("tandem_min_time", std::to_string(g_config.min_time_s));
    benchmark::AddCustomContext("tandem_bn_fusion", g_config.bn_fusion ? "1" : "0");
    benchmark::AddCustomContext("tandem_cudnn_benchmark", tandem::cudnn_benchmark() ? "1" : "0");
    benchmark::AddCustomContext("tandem_cuda_graph", g_config.cuda_graph && tandem::g_device.is_cuda() ? "1" : "0");
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
