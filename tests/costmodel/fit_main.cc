// tools/costmodel:fit: records the calibration points on the simulated GPU (kernels_bench's cases, models_bench's
// steps and Pipe-BD's blocks, at small sizes, extrapolated) into calibration_counters.json, fits the model's free
// constants to calibration.json and writes them to fitted.cc, then prints each point measured beside predicted;
// or records the calibration test's baseline (baseline_counters.json). It lives with the tests (and
// tools/costmodel:fit names it) because kernels_bench's cases are op cases of the test harness.
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "tests/opbench/kernel_cases.h"
#include "tools/costmodel/bd/bd_profile.h"
#include "tools/costmodel/calibration.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace costmodel {
namespace {

struct Options {
  std::string dir;
  bool record = true;     // record the points calibration_counters.json lacks
  bool rerecord = false;  // record every point again
  bool baseline = false;  // record baseline_counters.json only
};

// A point of m recorded from the tree as it is.
Point record_point(const Measurement& m) {
  std::fprintf(stderr, "fit: recording %s\n", m.label.c_str());
  Point p;
  p.m = m;
  if (m.kind == PointKind::Kernel) {
    for (const KernelCase& c : testing::kernel_cases())
      if (c.name == m.kernel) p.ops = record_kernel_case(c, m.n, c.record_arg, &p.bytes);
  } else if (m.kind == PointKind::ModelStep) {
    p.ops = record_model_step(m.step);
  } else {
    p.model = record_pipe_bd_point(m);
  }
  return p;
}

int run(const Options& o) {
  const std::string calibration_path = o.dir + "/calibration.json";
  const std::string counters_path = o.dir + "/calibration_counters.json";
  const std::string baseline_path = o.dir + "/baseline_counters.json";
  if (o.baseline) {
    TD_CHECK(counters_available(), counters_unavailable_reason());
    write_text(baseline_path, records_text(baseline_to_json(record_baseline(testing::kernel_cases()))));
    std::printf("fit: wrote %s\n", baseline_path.c_str());
    return 0;
  }
  const std::vector<Measurement> ms =
      parse_calibration(parse_json(read_text(calibration_path)), testing::kernel_cases());
  Json counters = Json::object();
  if (!o.rerecord && std::filesystem::exists(counters_path)) counters = parse_json(read_text(counters_path));
  std::vector<Measurement> missing;
  for (const Measurement& m : ms)
    if (!counters.contains(m.kind == PointKind::PipeBd ? m.run_label() : m.label)) missing.push_back(m);
  if (!missing.empty()) {
    TD_CHECK(o.record, missing.size(), " calibration points have no recorded counters (the first: ", missing[0].label,
             "); record them from the commit their run measured, without --no-record");
    TD_CHECK(counters_available(), counters_unavailable_reason());
    std::fprintf(stderr,
                 "fit: recording %zu points from this tree, which must be what their runs measured (commit %s)\n",
                 missing.size(), missing[0].commit.c_str());
    std::vector<Point> points;
    for (const Measurement& m : missing) points.push_back(record_point(m));
    const Json recorded = points_to_json(points);  // not in the loop's range: items() would outlive it
    for (auto& [label, e] : recorded.items()) counters[label] = e;
    write_text(counters_path, records_text(counters));
    std::printf("fit: wrote %s\n", counters_path.c_str());
    // The tree the run measured is also the baseline of the calibration test's check.
    write_text(baseline_path, records_text(baseline_to_json(record_baseline(testing::kernel_cases()))));
    std::printf("fit: wrote %s\n", baseline_path.c_str());
  }
  const std::vector<Point> points = join_counters(ms, counters, read_pipe_bd_point);
  const FitResult r = fit(points);
  write_text(o.dir + "/fitted.cc", constants_source(r, points));
  size_t fitted = 0;
  for (const Point& p : points) fitted += p.m.kind != PointKind::PipeBd;
  std::printf(
      "fit: wrote %s/fitted.cc (rms log error %.4f over the %zu kernel and model-step points; the Pipe-BD\n"
      "points fit the host's time per op alone: %.2f us, rms log error %.4f over the %zu of them)\n",
      o.dir.c_str(), r.rms_log_error, fitted, r.constants.host_op_s * 1e6, r.host_rms_log_error,
      points.size() - fitted);
  std::printf("%-53s %-5s %12s %12s %7s\n", "point", "gpu", "measured_us", "predicted_us", "ratio");
  for (const Point& p : points) {
    const double pred = predicted_s(p, r.constants), meas = p.measured_s();
    std::printf("%-53s %-5s %12.1f %12.1f %7.3f\n", p.m.label.c_str(), p.m.gpu.c_str(), meas * 1e6, pred * 1e6,
                pred / meas);
  }
  return 0;
}

}  // namespace
}  // namespace costmodel
}  // namespace tandem

int main(int argc, char** argv) {
  tandem::costmodel::Options o;
  const char* workspace = std::getenv("BUILD_WORKSPACE_DIRECTORY");
  o.dir = std::string(workspace != nullptr ? workspace : ".") + "/tools/costmodel";
  tandem::flags::Parser p(
      "fit", "fit [--dir DIR] [--no-record | --rerecord | --baseline]",
      "Fits the GPU cost model to the measured runs of calibration.json. The points that\n"
      "calibration_counters.json lacks (a run just added) are recorded on the simulated GPU from this tree, which\n"
      "must be the commit the run measured (kernels_bench's cases from 2^18 and 2^20 elements, models_bench's\n"
      "steps from batches 1 and 2, Pipe-BD's blocks from 2 and 4 rows, extrapolated to the measured sizes),\n"
      "with the baseline of the calibration test (baseline_counters.json); then the free constants are fitted\n"
      "(least squares of the log ratios, Nelder-Mead; the host's time per op to the Pipe-BD runs alone) and\n"
      "written to fitted.cc, and every point is printed\n"
      "measured beside predicted. Run it with bazel run --config=cudasim //tools/costmodel:fit [-- flags].");
  p.text("--dir", "DIR", &o.dir, "where calibration.json is and the outputs go (default: tools/costmodel)");
  p.flag("--no-record", &o.record, false, "refit from calibration_counters.json as it is");
  p.flag("--rerecord", &o.rerecord, true, "record every point again (from the commit the runs measured)");
  p.flag("--baseline", &o.baseline, true,
         "only record baseline_counters.json from this tree (after an intended change of a kernel)");
  p.parse(argc, argv);
  // The simulated GPU with an H100's and H200's SM count, so that launches are shaped as there.
  setenv("TANDEM_CUDASIM_SMS", "132", 0);
  return tandem::flags::run_reporting_errors("fit", [&] { return tandem::costmodel::run(o); });
}
