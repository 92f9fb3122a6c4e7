// The cost model held to the measured H200 run (tools/costmodel/calibration.json): every kernels_bench case at
// 2^26 elements and ResNet-50's fwd_bwd step at 224x224, batch 256, are predicted within 25% of their measured
// times, from ops recorded on the simulated GPU at 2^18 and 2^20 elements and at batches 1 and 2, extrapolated
// (calibration_counters.json, recorded from the tree the run measured); Pipe-BD's TR+DPU+AHD over DP on 4 SM
// partitions within 25% of the measured speedup; the fit of those counters gives the constants of fitted.cc;
// and the kernels still do what baseline_counters.json recorded (every kernels_bench case and a ResNet-18 step
// at 32x32 recorded again, in the simulator build).
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "runtime/base/files.h"
#include "tests/opbench/kernel_cases.h"
#include "tools/costmodel/bd/bd_profile.h"
#include "tools/costmodel/calibration.h"

namespace tandem {
namespace costmodel {
namespace {

constexpr double kTolerance = 0.25;

std::vector<Measurement> measurements() {
  return parse_calibration(parse_json(read_text("tools/costmodel/calibration.json")), testing::kernel_cases());
}
Json counters() { return parse_json(read_text("tools/costmodel/calibration_counters.json")); }
std::vector<Point> stored_points() { return join_counters(measurements(), counters(), read_pipe_bd_point); }

TEST(CostModelCalibration, FittingTheStoredCountersGivesFittedCc) {
  const FitResult r = fit(stored_points());
  const auto got = named_constants(r.constants), want = named_constants(fitted_constants());
  for (size_t i = 0; i < got.size(); ++i)
    EXPECT_NEAR(got[i].second, want[i].second, 1e-9 * std::abs(want[i].second))
        << got[i].first << ": fitted.cc is not the fit of calibration.json and calibration_counters.json; rerun "
        << "bazel run --config=cudasim //tools/costmodel:fit";
}

TEST(CostModelCalibration, KernelsAndResNet50StepWithinAQuarterOfTheH200Run) {
  int kernels = 0, resnet50 = 0;
  for (const Point& p : stored_points()) {
    const double pred = predicted_s(p, fitted_constants()), meas = p.measured_s();
    std::printf("%-44s %-5s measured %9.1f us predicted %9.1f us ratio %.3f\n", p.m.label.c_str(), p.m.gpu.c_str(),
                meas * 1e6, pred * 1e6, pred / meas);
    const bool kernel = p.m.kind == PointKind::Kernel;
    const bool held =
        kernel || (p.m.kind == PointKind::ModelStep && p.m.step.label() == "resnet50/224/fwd_bwd batch 256");
    if (!held) continue;
    (kernel ? kernels : resnet50)++;
    EXPECT_LE(std::abs(pred / meas - 1), kTolerance) << p.m.label << " on " << p.m.gpu;
  }
  EXPECT_EQ(kernels, 15);
  EXPECT_EQ(resnet50, 1);
}

// The H200 run's Pipe-BD setting: compression (ResNet-18 teacher, depthwise-separable student), 32x32, batch
// 256, 6 steps a block, on 4 SM partitions of the H200, where TR+DPU+AHD measured 2.23x DP (the simulator,
// from a measured profile, 2.17x). The model's projection from recorded block costs, with the GPU constants
// fitted elsewhere and the host's time per op fitted to these five points (calibration.h), must find, as the
// run did, that TR+DPU+AHD is the fastest strategy, and its speedup over DP within 25% of the measured one
// (the tolerance of the other checks). TR, LS and TR+DPU are printed, not held: their bottleneck, the
// student's first block at 256 rows, is GPU-bound in the depthwise convolutions, which the model times at
// MobileNetV2's 224x224 efficiency (README).
TEST(CostModelCalibration, PipeBdOnFourSmPartitionsOfTheH200) {
  std::map<std::string, double> predicted, measured;
  for (const Point& p : stored_points())
    if (p.m.kind == PointKind::PipeBd) {
      predicted[p.m.strategy] = predicted_s(p, fitted_constants());
      measured[p.m.strategy] = p.measured_s();
    }
  ASSERT_EQ(predicted.size(), 5u);
  for (const auto& [s, t] : predicted) {
    std::printf("%-4s projected %.3f s/epoch (%.2fx DP), measured %.3f s/epoch (%.2fx DP)\n", s.c_str(), t,
                predicted["dp"] / t, measured[s], measured["dp"] / measured[s]);
    if (s != "ahd") {
      EXPECT_LT(predicted["ahd"], t) << "TR+DPU+AHD is not the fastest projected strategy: " << s;
    }
  }
  const double projected = predicted["dp"] / predicted["ahd"], run = measured["dp"] / measured["ahd"];
  EXPECT_LE(std::abs(projected / run - 1), kTolerance)
      << "TR+DPU+AHD projected at " << projected << "x DP, measured " << run << "x";
}

// The check of the stored counters finds a kernel whose traffic changed (here: made to load every sector twice).
TEST(CostModelCalibration, ChangedCountersAreFound) {
  const std::vector<Point> stored = stored_points();
  std::vector<Point> fresh = stored;
  for (Point& p : fresh)
    if (p.m.label.find(": kernel add ") != std::string::npos)
      for (OpCounts& op : p.ops) op.distinct_load_sectors *= 2;
  const std::vector<std::string> changed = changed_points(stored, fresh, fitted_constants(), 0.02);
  ASSERT_EQ(changed.size(), 1u);
  EXPECT_NE(changed[0].find("kernel add "), std::string::npos) << changed[0];
  EXPECT_TRUE(changed_points(stored, stored, fitted_constants(), 0.02).empty());
}

// The kernels do what baseline_counters.json recorded (every kernels_bench case at its largest size and a small
// ResNet-18 step, recorded again): a kernel made uncoalesced or given another pass over memory shows here.
TEST(CostModelCalibration, KernelsDoWhatTheBaselineRecorded) {
  if (!counters_available()) GTEST_SKIP() << counters_unavailable_reason();
  std::map<std::string, Point> stored;
  for (const Point& p : baseline_from_json(parse_json(read_text("tools/costmodel/baseline_counters.json"))))
    stored[p.m.label] = p;
  std::vector<Point> before, now;
  for (const Point& p : record_baseline(testing::kernel_cases())) {
    auto it = stored.find(p.m.label);
    if (it == stored.end()) {
      ADD_FAILURE() << p.m.label << " is not in baseline_counters.json";
      continue;
    }
    before.push_back(it->second);
    now.push_back(p);
  }
  for (const std::string& c : changed_points(before, now, fitted_constants(), 0.02))
    ADD_FAILURE() << c << ": what the kernels do changed since baseline_counters.json was recorded; if that is "
                  << "intended, record a new baseline: bazel run --config=cudasim //tools/costmodel:fit -- --baseline";
}

}  // namespace
}  // namespace costmodel
}  // namespace tandem
