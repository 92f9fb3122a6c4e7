// Recording kernels_bench cases and models_bench steps at small sizes, extrapolated.
#include "tools/costmodel/record.h"

#include "runtime/base/error.h"
#include "runtime/memory/stream.h"
#include "tools/costmodel/model_step.h"
#include "tools/costmodel/scaling.h"

namespace tandem {
namespace costmodel {

std::vector<OpCounts> record_kernel_case(const KernelCase& c, int64_t n, int64_t n_small, double* bytes,
                                         Extrapolation how) {
  TD_CHECK(n_small > 0 && n >= n_small, "kernel case ", c.name, ": cannot extrapolate from ", n_small, " to ", n);
  std::vector<std::vector<OpCounts>> runs;
  std::vector<double> sizes;
  // Four times n_small: square sizes stay square (copy_transpose's matrix is the square of a power of two).
  for (const int64_t m : {n_small, 4 * n_small}) {
    if (how == Extrapolation::Proportional && m > n_small) break;
    KernelRun run = c.make(m);
    Stream s = current_stream(Device::cuda(0));
    run.launch(s);
    s.synchronize();
    Recording rec;
    run.launch(s);
    runs.push_back(rec.take());
    sizes.push_back(run.bytes);
  }
  if (how == Extrapolation::Proportional) {
    if (bytes != nullptr) *bytes = sizes[0] * static_cast<double>(n) / static_cast<double>(n_small);
    return extrapolate({}, 0, runs[0], static_cast<double>(n_small), static_cast<double>(n));
  }
  const double f = static_cast<double>(n - n_small) / static_cast<double>(3 * n_small);
  if (bytes != nullptr) *bytes = sizes[0] + f * (sizes[1] - sizes[0]);
  return extrapolate(runs[0], static_cast<double>(n_small), runs[1], static_cast<double>(4 * n_small),
                     static_cast<double>(n));
}

std::string StepSpec::label() const {
  return model + "/" + std::to_string(size) + "/" + mode + " batch " + std::to_string(batch) +
         (channels_last ? "" : " nchw");
}

namespace {

// One dry step of spec at batch b, and at 2 b unless the extrapolation is proportional, each run by record(step)
// after a warm-up that is not recorded.
template <typename Record>
void run_model_steps(const StepSpec& spec, int64_t b, Extrapolation how, const Record& record) {
  TD_CHECK(b >= 1 && spec.batch >= b, spec.label(), ": cannot extrapolate from batch ", b);
  ModelStep step(spec.model, spec.mode, Device::cuda(0), spec.channels_last);
  for (const int64_t batch : {b, 2 * b}) {
    if (how == Extrapolation::Proportional && batch > b) break;
    step.set_inputs(batch, spec.size);
    if (batch == b) {
      // Algorithm searches, gradients and optimizer state come into being in the first step.
      SkipArithmetic warm_up;
      step.run();
      current_stream(step.device()).synchronize();
    }
    record(step);
  }
}

}  // namespace

std::vector<OpCounts> record_model_step(const StepSpec& spec, int64_t b, Extrapolation how) {
  std::vector<std::vector<OpCounts>> runs;
  run_model_steps(spec, b, how, [&](ModelStep& step) {
    Recording rec(true);
    step.run();
    runs.push_back(rec.take());
  });
  if (how == Extrapolation::Proportional)
    return extrapolate({}, 0, runs[0], static_cast<double>(b), static_cast<double>(spec.batch));
  return extrapolate(runs[0], static_cast<double>(b), runs[1], static_cast<double>(2 * b),
                     static_cast<double>(spec.batch));
}

OpsByOp record_model_step_by_op(const StepSpec& spec, int64_t b) {
  std::vector<OpsByOp> runs;
  run_model_steps(spec, b, Extrapolation::TwoSizes,
                  [&](ModelStep& step) { runs.push_back(record_by_op([&] { step.run(); }, true)); });
  return extrapolate_by_op(runs[0], static_cast<double>(b), runs[1], static_cast<double>(2 * b),
                           static_cast<double>(spec.batch));
}

}  // namespace costmodel
}  // namespace tandem
