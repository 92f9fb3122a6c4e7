// Microbenchmarks of the CUDA backend's memory-bound kernels: elementwise, reductions, softmax, copies,
// batch norm, pooling and layout copies (op cases of the test harness at shapes of their own, one pass each:
// tests/opbench/kernel_cases.h), timed with CUDA events and reported
// as bytes/s and as a percentage of the device's copy bandwidth (a large device-to-device cudaMemcpyAsync,
// bytes read + written), measured once at start-up. With --predict GPU, the same columns predicted by the
// cost model for that GPU instead, from the kernels' counters on the simulated GPU.
// Goals on an H100/H200: >= 85% of copy bandwidth for elementwise, >= 80% for reductions, softmax and
// transposing copies.
#include <benchmark/benchmark.h>
#include <cuda_runtime_api.h>

#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <regex>
#include <string>

#include "runtime/base/cuda_check.h"
#include "runtime/base/device.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/tensor.h"
#include "tests/opbench/kernel_cases.h"
#include "tools/costmodel/model.h"
#include "tools/costmodel/record.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

double g_copy_bytes_per_s = 0;  // read + written

Device gpu() { return Device::cuda(0); }

// Holds a stream while the host queues work behind it: a host function on the stream that waits until open() (or
// a second, so that a launch that synchronizes the stream itself only slows, never hangs), so that the start
// event, the case's kernels and the stop event are all queued before the first of them runs and the op's host
// work (its checks, allocations, the launches) falls outside the events.
class StreamGate {
 public:
  explicit StreamGate(const Stream& s) : stream_(s.cuda()) {}
  // Opened, and its host function done, before it goes (also when a launch threw while it held the stream).
  ~StreamGate() {
    open();
    cudaStreamSynchronize(stream_);
  }
  void hold() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = false;
    }
    TD_CUDA_CHECK(cudaLaunchHostFunc(stream_, &StreamGate::wait, this));
  }
  void open() {
    {
      std::lock_guard<std::mutex> lock(mu_);
      open_ = true;
    }
    cv_.notify_all();
  }
  // Holds that gave up waiting (a launch that waited for the stream; its iteration then timed host work too).
  int timeouts() {
    std::lock_guard<std::mutex> lock(mu_);
    return timeouts_;
  }

 private:
  static void CUDART_CB wait(void* self) {
    StreamGate& g = *static_cast<StreamGate*>(self);
    std::unique_lock<std::mutex> lock(g.mu_);
    if (!g.cv_.wait_for(lock, std::chrono::seconds(1), [&] { return g.open_; })) ++g.timeouts_;
  }
  cudaStream_t stream_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool open_ = true;
  int timeouts_ = 0;
};

// Times the case's launch (queued on the current stream behind a StreamGate) with CUDA events, after a warm-up.
void run_timed(benchmark::State& state, const costmodel::KernelCase& c) {
  const costmodel::KernelRun run = c.make(state.range(0));
  Stream s = current_stream(gpu());
  for (int i = 0; i < 3; ++i) run.launch(s);
  s.synchronize();
  StreamGate gate(s);
  Event start(true), stop(true);
  double total_s = 0;
  for (auto _ : state) {
    gate.hold();
    start.record(s);
    run.launch(s);
    stop.record(s);
    gate.open();
    stop.synchronize();
    const double sec = start.elapsed_ms(stop) * 1e-3;
    state.SetIterationTime(sec);
    total_s += sec;
  }
  const double iters = static_cast<double>(state.iterations());
  state.SetBytesProcessed(static_cast<int64_t>(run.bytes * iters));
  state.counters["pct_of_copy_bw"] = 100.0 * run.bytes * iters / total_s / g_copy_bytes_per_s;
  if (gate.timeouts() > 0) {
    state.counters["gate_timeouts"] = gate.timeouts();
    std::fprintf(stderr, "kernels_bench: %s: %d launches waited for the stream, their times include host work\n",
                 c.name.c_str(), gate.timeouts());
  }
}

// Device-to-device copy bandwidth (bytes read + written per second) of a 1 GiB cudaMemcpyAsync.
double measure_copy_bandwidth() {
  const int64_t bytes = int64_t{1} << 30;
  Tensor a = empty({bytes}, TensorOptions(DType::U8).with_device(gpu()));
  Tensor b = empty({bytes}, TensorOptions(DType::U8).with_device(gpu()));
  Stream s = current_stream(gpu());
  auto copy = [&] {
    TD_CUDA_CHECK(cudaMemcpyAsync(b.raw_data(), a.raw_data(), bytes, cudaMemcpyDeviceToDevice, s.cuda()));
  };
  for (int i = 0; i < 3; ++i) copy();
  Event start(true), stop(true);
  constexpr int kReps = 20;
  start.record(s);
  for (int i = 0; i < kReps; ++i) copy();
  stop.record(s);
  stop.synchronize();
  return 2.0 * bytes * kReps / (start.elapsed_ms(stop) * 1e-3);
}

// The cases' time, bytes/s and share of the copy bandwidth predicted for `gpu_name` from their counters on
// the simulated GPU (recorded at each case's record_arg and 4 times it, extrapolated); only the cases whose
// Google Benchmark name ("relu/1048576", "batch_norm_backward_nhwc/batch:4") matches `filter` when given.
int predict(const std::string& gpu_name, const std::string& filter) {
  const std::regex match(filter.empty() ? "." : filter);
  const costmodel::GpuSpec& g = costmodel::gpu_spec(gpu_name);
  TD_CHECK(costmodel::counters_available(), "--predict: ", costmodel::counters_unavailable_reason());
  std::printf(
      "PREDICTED for %s by the cost model (tools/costmodel), not measured: each case's counters recorded on the\n"
      "simulated GPU at small sizes, extrapolated; %% of the copy bandwidth measured on that GPU (%.1f GB/s)\n",
      g.title.c_str(), g.copy_bytes_per_s * 1e-9);
  std::printf("%-32s %-5s %9s %12s %12s %16s  %s\n", "case", "arg", "value", "pred_us", "pred_GB/s", "pred_pct_of_copy",
              "bound");
  for (const costmodel::KernelCase& c : testing::kernel_cases())
    for (const int64_t arg : c.args) {
      const std::string name =
          c.name + "/" + (c.arg_name == "n" ? "" : c.arg_name + ":") + std::to_string(static_cast<long long>(arg));
      if (!std::regex_search(name, match)) continue;
      double bytes = 0;
      const std::vector<costmodel::OpCounts> ops = costmodel::record_kernel_case(c, arg, c.record_arg, &bytes);
      double seconds = 0;
      std::string bound;
      for (const costmodel::OpCounts& op : ops) {
        const costmodel::OpTime t = costmodel::predict(op, g, costmodel::fitted_constants());
        seconds += t.seconds;
        bound += (bound.empty() ? "" : "+") + t.bound;
      }
      std::printf("%-32s %-5s %9lld %12.1f %12.1f %16.1f  %s\n", c.name.c_str(), c.arg_name.c_str(),
                  static_cast<long long>(arg), seconds * 1e6, bytes / seconds * 1e-9,
                  100 * bytes / seconds / g.copy_bytes_per_s, bound.c_str());
    }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  std::string predict;
  tandem::flags::Parser p(
      "kernels_bench", "kernels_bench [--predict h100|h200] [Google Benchmark flags, e.g. --benchmark_filter=REGEX]",
      "Times the CUDA backend's elementwise, reduction, softmax and copy kernels, and batch norm, ResNet's\n"
      "stem pooling and NCHW <-> NHWC copies of [batch, 64, 56, 56] (batch 4 and 256), on GPU 0 with CUDA\n"
      "events, and reports bytes/s and the percentage of the device's copy bandwidth (measured at start-up\n"
      "with a 1 GiB device-to-device copy), from each op's minimal traffic. Goals on an H100/H200: >= 85% for\n"
      "elementwise ops, >= 80% for reductions, softmax and transposing copies. Without a GPU it says so and\n"
      "exits 1. Google Benchmark's own flags follow.");
  p.custom(
      "--predict", "GPU", [&](const std::string& v) { predict = tandem::costmodel::gpu_spec(v).name; },
      "h100 or h200: print the same columns as predicted by the cost model for that GPU,\n"
      "from the kernels' counters on the simulated GPU (--config=cudasim, tools/tandem sim), for\n"
      "the cases --benchmark_filter=REGEX matches (all by default)");
  std::vector<std::string> rest_args = p.parse_known(argc, argv, [&] {
    char* help[] = {argv[0], const_cast<char*>("--help")};
    int n = 2;
    benchmark::Initialize(&n, help);  // prints its flags and exits
  });
  if (!predict.empty()) {
    setenv("TANDEM_CUDASIM_SMS", "132", 0);  // launches shaped as on an H100 or H200
    std::string filter;
    for (const std::string& a : rest_args)
      if (a.rfind("--benchmark_filter=", 0) == 0) filter = a.substr(std::strlen("--benchmark_filter="));
    return tandem::flags::run_reporting_errors("kernels_bench", [&] { return tandem::predict(predict, filter); });
  }
  std::vector<char*> rest{argv[0]};
  for (std::string& a : rest_args) rest.push_back(&a[0]);
  int rest_argc = static_cast<int>(rest.size());
  // Without a GPU, or when a kernel fails: "kernels_bench: what went wrong", exit 1 (an exception escaping a
  // benchmark function would otherwise pass through Google Benchmark and abort).
  return tandem::flags::run_reporting_errors("kernels_bench", [&] {
    tandem::check_device_available(tandem::Device::cuda(0));
    benchmark::Initialize(&rest_argc, rest.data());
    if (benchmark::ReportUnrecognizedArguments(rest_argc, rest.data())) return 1;
    cudaDeviceProp prop{};
    TD_CUDA_CHECK(cudaGetDeviceProperties(&prop, 0));
    tandem::g_copy_bytes_per_s = tandem::measure_copy_bandwidth();
    std::printf("device: %s; copy bandwidth (1 GiB device-to-device cudaMemcpyAsync, read + write): %.1f GB/s\n",
                prop.name, tandem::g_copy_bytes_per_s * 1e-9);
    for (const tandem::costmodel::KernelCase& c : tandem::testing::kernel_cases()) {
      auto* b = benchmark::RegisterBenchmark(c.name.c_str(), [&c](benchmark::State& s) { tandem::run_timed(s, c); });
      if (c.arg_name != "n") b->ArgName(c.arg_name);  // the element-count cases keep their plain names
      for (const int64_t arg : c.args) b->Arg(arg);
      b->UseManualTime()->Unit(benchmark::kMicrosecond);
    }
    benchmark::RunSpecifiedBenchmarks();
    benchmark::Shutdown();
    return 0;
  });
}
