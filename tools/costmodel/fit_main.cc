// tools/costmodel:fit: records every calibration point on the simulated GPU (kernels_bench's cases and
// models_bench's steps, at small sizes, extrapolated), writes calibration_counters.json, fits the model's free
// constants to calibration.json and writes them to fitted.cc, then prints each point measured beside predicted.
#include <cstdio>
#include <cstdlib>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "tools/costmodel/bd/bd_profile.h"
#include "tools/costmodel/calibration.h"
#include "tools/flags/flags.h"

namespace tandem {
namespace costmodel {
namespace {

struct Options {
  std::string dir;
  bool record = true;
};

int run(const Options& o) {
  const std::string calibration_path = o.dir + "/calibration.json";
  const std::string counters_path = o.dir + "/calibration_counters.json";
  const std::vector<Measurement> ms = parse_calibration(parse_json(read_text(calibration_path)));
  Json counters;
  if (o.record) {
    TD_CHECK(counters_available(), counters_unavailable_reason());
    std::map<std::string, Point> recorded;  // one recording per label, whatever the GPU
    std::vector<Point> points;
    for (const Measurement& m : ms) {
      if (!recorded.count(m.label)) {
        std::fprintf(stderr, "fit: recording %s\n", m.label.c_str());
        Point p;
        p.m = m;
        if (m.kind == PointKind::Kernel) {
          for (const KernelCase& c : kernel_cases())
            if (c.name == m.kernel) p.ops = record_kernel_case(c, m.n, kKernelRecordElements, &p.bytes);
        } else if (m.kind == PointKind::ModelStep) {
          p.ops = record_model_step(m.step);
        } else {
          p.model = record_pipe_bd_point(m);
        }
        recorded[m.label] = p;
      }
      Point p = recorded[m.label];
      p.m = m;
      points.push_back(p);
    }
    counters = Json::object();
    counters["points"] = points_to_json(points);
    std::fprintf(stderr, "fit: recording the probe %s\n", probe_step().label().c_str());
    counters["probe"] = points_to_json({probe_point(record_model_step(probe_step(), kProbeRecordBatch))});
    write_text(counters_path, dump_json(counters, 1));
    std::printf("fit: wrote %s\n", counters_path.c_str());
  } else {
    counters = parse_json(read_text(counters_path));
  }
  const std::vector<Point> points = join_counters(ms, json_at(counters, "points"), read_pipe_bd_point);
  const FitResult r = fit(points);
  write_text(o.dir + "/fitted.cc", constants_source(r, points));
  size_t fitted = 0;
  for (const Point& p : points) fitted += p.m.kind != PointKind::PipeBd;
  std::printf(
      "fit: wrote %s/fitted.cc (rms log error %.4f over the %zu kernel and model-step points; Pipe-BD\n"
      "points are compared, not fitted)\n",
      o.dir.c_str(), r.rms_log_error, fitted);
  std::printf("%-44s %-5s %12s %12s %7s\n", "point", "gpu", "measured_us", "predicted_us", "ratio");
  for (const Point& p : points) {
    const double pred = predicted_s(p, r.constants), meas = p.measured_s();
    std::printf("%-44s %-5s %12.1f %12.1f %7.3f\n", p.m.label.c_str(), p.m.gpu.c_str(), meas * 1e6, pred * 1e6,
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
      "fit", "fit [--dir DIR] [--no-record]",
      "Fits the GPU cost model to the measured runs of calibration.json: records each point on the simulated GPU\n"
      "(kernels_bench's cases from 2^18 and 2^20 elements, models_bench's steps from batches 1 and 2, Pipe-BD's\n"
      "blocks from 2 and 4 rows, extrapolated to the measured sizes) into calibration_counters.json, fits the free "
      "constants (least squares of the log\n"
      "ratios, Nelder-Mead) and writes them to fitted.cc, then prints every point measured beside predicted.\n"
      "Run it with bazel run --config=cudasim //tools/costmodel:fit after adding a GPU run or changing kernels.");
  p.text("--dir", "DIR", &o.dir, "where calibration.json is and the outputs go (default: tools/costmodel)");
  p.flag("--no-record", &o.record, false, "refit from calibration_counters.json as it is");
  p.parse(argc, argv);
  // The simulated GPU with an H100's and H200's SM count, so that launches are shaped as there.
  setenv("TANDEM_CUDASIM_SMS", "132", 0);
  return tandem::flags::run_reporting_errors("fit", [&] { return tandem::costmodel::run(o); });
}
