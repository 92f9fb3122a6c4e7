// op_bench: every op case of the harness (tests/opbench/case_families.h) timed as a benchmark, forward and
// forward + backward, on the CPU and on CUDA when a GPU is present, at a benchmark size (each case's batch inputs'
// dimension 0 multiplied); reports time, GB/s, GFLOP/s and the share of the device's ceiling measured at start-up
// (a large copy's bandwidth, or a large matmul's FLOP/s for the cases whose FLOPs per byte exceed the device's).
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <regex>
#include <string>
#include <vector>

#include "bench/load_average.h"
#include "runtime/base/config.h"
#include "runtime/base/dtype.h"
#include "runtime/base/error.h"
#include "tests/harness/op_bench.h"
#include "tests/opbench/case_families.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace {

using testing::BenchOptions;
using testing::BenchResult;
using testing::Ceilings;

struct Settings {
  std::string filter;
  std::string devices = "all";
  int64_t elements = -1;  // -1: each device's default
  double min_seconds = 0.1;
  std::string dtype = "f32";
  bool forward_only = false;
};

constexpr int64_t kCpuElements = int64_t{1} << 22, kCudaElements = int64_t{1} << 24;

std::vector<Device> devices_of(const std::string& which) {
  if (which == "cpu") return {Device::cpu()};
  if (which == "cuda") {
    check_device_available(Device::cuda(0));
    return {Device::cuda(0)};
  }
  if (cuda_available()) return {Device::cpu(), Device::cuda(0)};
  std::printf("no GPU: the CPU only\n");
  return {Device::cpu()};
}

// The ceilings: a copy of as many elements as the cases' batch inputs hold (at least 2^20), so that both see the
// same caches; a matmul of two squares of side sqrt(elements), 256 to 4096 (2048 on the CPU by default, 4096 on
// CUDA: large enough for a GEMM's peak, small enough for the simulated GPU at --elements 0).
Ceilings ceilings_of(const BenchOptions& o) {
  const bool gpu = o.device.is_cuda();
  const int64_t side = std::clamp<int64_t>(std::llround(std::sqrt(static_cast<double>(o.elements))), 256, 4096);
  const Ceilings c = testing::measure_ceilings(o, std::max(o.elements, int64_t{1} << 20), side);
  std::printf(
      "\n%s, %s, %lld elements: copy %.1f GB/s (read + written), matmul %lld^2 %.1f GFLOP/s%s; load average %.2f\n",
      o.device.str().c_str(), dtype_name(o.dtype), static_cast<long long>(o.elements), c.bytes_per_s * 1e-9,
      static_cast<long long>(side), c.flops_per_s * 1e-9,
      gpu && o.dtype == DType::F32 && allow_tf32() ? " (TF32 allowed)" : "", load_average());
  std::printf("%-14s %-42s %-16s %-16s %5s %11s %9s %10s %8s\n", "family", "case", "pass", "input 0", "reps", "us/call",
              "GB/s", "GFLOP/s", "%ceil");
  return c;
}

void print_result(const std::string& family, const std::string& name, const BenchResult& r, const Ceilings& c) {
  const testing::Utilisation u = testing::utilisation(r, c);
  char flops[32] = "-";
  if (r.flops > 0) std::snprintf(flops, sizeof flops, "%.2f", r.flops / r.seconds * 1e-9);
  std::printf("%-14s %-42s %-16s %-16s %5d %11.1f %9.2f %10s %6.1f %s\n", family.c_str(), name.c_str(), r.pass.c_str(),
              r.shapes.empty() ? "-" : shape_str(r.shapes[0]).c_str(), r.reps, r.seconds * 1e6,
              r.bytes / r.seconds * 1e-9, flops, 100 * u.fraction, u.compute_bound ? "F" : "B");
}

int run(const Settings& s) {
  const std::regex match(s.filter.empty() ? "." : s.filter);
  for (const Device& d : devices_of(s.devices)) {
    BenchOptions o;
    o.device = d;
    o.dtype = parse_dtype(s.dtype);
    o.elements = s.elements >= 0 ? s.elements : (d.is_cuda() ? kCudaElements : kCpuElements);
    o.min_seconds = s.min_seconds;
    const Ceilings c = ceilings_of(o);
    for (const testing::CaseFamily& f : testing::case_families())
      for (testing::OpCase& cs : f.cases()) {
        if (!std::regex_search(f.name + "/" + cs.name, match)) continue;
        if (s.forward_only) cs.grad = false;
        for (const BenchResult& r : testing::bench_case(cs, o)) print_result(f.name, cs.name, r, c);
      }
  }
  return 0;
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::Settings s;
  tandem::flags::Parser p(
      "op_bench", "op_bench [--filter REGEX] [--device cpu|cuda|all] [--elements N] [--min-time S] [--dtype f32|f64]",
      "Times every op case of the test harness (the families of tests/opbench/case_families.cc), forward and\n"
      "forward + backward, on the CPU and on GPU 0 when one is present. Each case's batch inputs (dimension 0)\n"
      "are multiplied until the first has at least N elements (4194304 on the CPU, 16777216 on CUDA; cases\n"
      "without batch inputs run at their test size). Reports microseconds per call, GB/s (the inputs read and\n"
      "outputs written once), GFLOP/s (where the case counts FLOPs; forward + backward: 3 times the forward's)\n"
      "and the percentage of the device's ceiling measured at start-up: the bandwidth of a copy of max(N, 2^20)\n"
      "elements (B), or, for a case with more FLOPs per byte than the device, the FLOP/s of a matmul of two\n"
      "squares of side sqrt(N), 256 to 4096 (F).");
  p.text("--filter", "REGEX", &s.filter, "only the cases whose FAMILY/NAME matches (e.g. 'conv|pool')");
  p.custom(
      "--device", "WHICH",
      [&](const std::string& v) {
        TD_CHECK(v == "cpu" || v == "cuda" || v == "all", "--device: cpu, cuda or all, not '", v, "'");
        s.devices = v;
      },
      "cpu, cuda (GPU 0) or all (default: the CPU, and GPU 0 when present)");
  p.integer("--elements", "N", &s.elements, "elements of each case's first batch input (0: the test's sizes)", 0);
  p.number("--min-time", "S", &s.min_seconds, "time each case and pass for at least S seconds (default 0.1)", 0);
  p.custom(
      "--dtype", "T",
      [&](const std::string& v) {
        TD_CHECK(v == "f32" || v == "f64", "--dtype: f32 or f64, not '", v, "'");
        s.dtype = v;
      },
      "f32 (default) or f64");
  p.flag("--forward-only", &s.forward_only, true, "time the forward pass alone");
  p.parse(argc, argv);
  return tandem::flags::run_reporting_errors("op_bench", [&] { return tandem::run(s); });
}
