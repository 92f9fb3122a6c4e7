// The calibration of the cost model: the measured runs (calibration.json: per GPU run, kernels_bench's share of
// the copy bandwidth per case, models_bench's images/s per model step, bd_bench's seconds per epoch per
// Pipe-BD strategy), what was recorded for each of their points on the simulated GPU
// (calibration_counters.json, written by tools/costmodel:fit), the points' predicted and measured times, and
// the fit of the model's free constants to them.
//
// The fit: the free constants (kernels' memory efficiency, the sync cycles of collectives, barriers and
// shared-memory wavefronts, the launch floor, and cuDNN's efficiency for forward and backward convolutions,
// grouped and not) minimize the mean of (log predicted - log measured)^2 over the kernel and model-step points,
// found by Nelder-Mead on their logarithms from fixed starts (deterministic); the others keep their documented
// values (model.h). The Pipe-BD points do not take part in that fit: a run of several workers on SM partitions
// also measures what the GPU constants do not (the host's launches, partitions sharing one memory system), and
// fitting GPU constants to it would bend them away from what the GPU does. They fit the host's time per op
// (host_op_s) alone, with the GPU constants fixed: the run's workers are threads of one process
// (parallel/bd/session.cc) whose launches add up (bd_schedule.h's host_work_s), and its DP, whose every worker
// launches all of a step's ~580 ops, is the calibration set's one host-bound figure.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "runtime/formats/json.h"
#include "tools/costmodel/model.h"
#include "tools/costmodel/record.h"

namespace tandem {
namespace costmodel {

enum class PointKind { Kernel, ModelStep, PipeBd };

struct Measurement {
  // "COMMIT: kernel relu n 67108864", "COMMIT: " and a model step's StepSpec::label(), or a Pipe-BD run's; COMMIT
  // is the tree the run measured, which its points are recorded from.
  std::string label;
  std::string gpu, commit;
  PointKind kind = PointKind::Kernel;
  std::string kernel;  // kernels: the case and its size
  int64_t n = 0;
  double pct_of_copy = 0;  //   its bytes over its time, as a percentage of copy_bytes_per_s
  double copy_bytes_per_s = 0;
  StepSpec step;  // model steps
  double images_per_s = 0;
  // Pipe-BD runs (bd_bench): the workload ("nas" or "compression") at input x input, the global batch, steps
  // per block, the workers (GPUs, or SM partitions of one), the strategy and its measured seconds per epoch.
  std::string workload, strategy;
  int64_t input = 0, batch = 0, steps = 0;
  int workers = 0;
  bool sm_partitions = false;
  double seconds = 0;
  std::string run_label() const;  // the Pipe-BD run's label without the strategy (its points share records)
};

// The measurements of calibration.json (ValueError naming what is wrong in it, such as a kernel that is none of
// `cases`: kernels_bench's, tests/opbench/kernel_cases.h).
std::vector<Measurement> parse_calibration(const Json& j, const std::vector<KernelCase>& cases);

// What predicts a point that is more than a sum of ops (a Pipe-BD run: a simulated schedule).
class PointModel {
 public:
  virtual ~PointModel() = default;
  virtual double predict_s(const GpuSpec& gpu, const Constants& c) const = 0;
  virtual Json to_json() const = 0;
};

// A measurement with the ops recorded for it (and, for kernels, the case's least bytes at its size), or the
// model that predicts it.
struct Point {
  Measurement m;
  std::vector<OpCounts> ops;
  double bytes = 0;
  std::shared_ptr<const PointModel> model;
  double measured_s() const;
};

// calibration_counters.json's content: the ops (and bytes), or the point model's JSON, by label.
Json points_to_json(const std::vector<Point>& points);
// The text of a counters file: every record (an object whose values are numbers, strings or arrays of them, as
// an op) on a line of its own, so that the file stays small and a diff shows which ops changed.
std::string records_text(const Json& j);
// Reads a Pipe-BD point's model back from its JSON (tools/costmodel/bd provides one).
using PointModelReader = std::function<std::shared_ptr<const PointModel>(const Measurement& m, const Json& j)>;
// The measurements joined with their recorded ops; ValueError naming one without ops (the counters are older
// than calibration.json: rerun the fit), or a Pipe-BD one when no reader is given.
std::vector<Point> join_counters(const std::vector<Measurement>& ms, const Json& counters,
                                 const PointModelReader& read_model = nullptr);

double predicted_s(const Point& p, const Constants& c);

struct FitResult {
  Constants constants;
  double rms_log_error = 0;       // over the kernel and model-step points
  double host_rms_log_error = 0;  // over the Pipe-BD points, at the fitted host_op_s
};
FitResult fit(const std::vector<Point>& points);

// fitted.cc's text for a fit: the constants to 17 significant digits, and how they were made.
std::string constants_source(const FitResult& r, const std::vector<Point>& points);

// Labels (with both predictions) of the points whose ops `fresh` predicts more than `tolerance` (relative)
// away from `stored`'s prediction, under the same constants: the counters changed since they were stored.
std::vector<std::string> changed_points(const std::vector<Point>& stored, const std::vector<Point>& fresh,
                                        const Constants& c, double tolerance);

// The baseline (baseline_counters.json): every kernels_bench case at its largest size and the probe, recorded
// from the tree as it is, for the calibration test to notice a change in what the kernels do (a kernel made
// uncoalesced, a new pass over memory) against the last recorded baseline. Points are predicted on the H200.
// Each is recorded once at its small size and scaled in proportion (Extrapolation::Proportional), so that the
// check takes seconds and per-element traffic, not launch floors, sets the predicted times it compares.
std::vector<Point> record_baseline(const std::vector<KernelCase>& cases);
Json baseline_to_json(const std::vector<Point>& points);
std::vector<Point> baseline_from_json(const Json& j);
// The step the calibration test records again to check that the stored model counters are still what the
// simulated GPU counts (small enough to record in seconds): ResNet-18's fwd_bwd at 32x32, recorded at batch
// kProbeRecordBatch (at batch 1, its last BatchNorm would see one value a channel) and scaled to batch 256.
StepSpec probe_step();
constexpr int64_t kProbeRecordBatch = 2;
// A point for the probe's ops (no measurement: its label only).
Point probe_point(std::vector<OpCounts> ops);

}  // namespace costmodel
}  // namespace tandem
