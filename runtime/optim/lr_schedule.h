// Learning-rate schedules (constant, step, multi-step, per-step cosine, linear warm-up composed with any of
// them) and the scheduler that applies one to an optimizer and keeps its position for checkpoints.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "runtime/optim/optim.h"

namespace tandem {
namespace optim {

// The factor of each group's initial learning rate after `step` optimizer steps (step 0: before the first).
class LrSchedule {
 public:
  virtual ~LrSchedule() = default;
  virtual double factor(int64_t step) const = 0;
  virtual std::string describe() const = 0;
};
using LrSchedulePtr = std::shared_ptr<const LrSchedule>;

LrSchedulePtr constant_lr();
// gamma^(step / step_size): PyTorch's StepLR.
LrSchedulePtr step_lr(int64_t step_size, double gamma = 0.1);
// gamma^(number of milestones <= step): PyTorch's MultiStepLR.
LrSchedulePtr multistep_lr(std::vector<int64_t> milestones, double gamma = 0.1);
// min + (1 - min) * (1 + cos(pi * step / total)) / 2, held at min after `total`: PyTorch's CosineAnnealingLR
// (with eta_min = min * initial lr) stepped every optimizer step.
LrSchedulePtr cosine_lr(int64_t total_steps, double min_factor = 0.0);
// Linear warm-up over `warmup_steps`, then `after` counted from the end of the warm-up:
//   step < W: (start + (1 - start) * step / W) * after(0);   step >= W: after(step - W).
LrSchedulePtr warmup_lr(int64_t warmup_steps, double start_factor, LrSchedulePtr after);

// Parses a schedule spec; durations are in epochs (fractions allowed) and become steps:
//   constant | step:EPOCHS[:GAMMA] | multistep:E1,E2,...[:GAMMA] | cosine[:MIN_FACTOR]
//   | warmup:EPOCHS[:START_FACTOR]+<any of the others>
// Cosine runs until `total_steps` (minus the warm-up). Throws ValueError quoting the spec and the grammar.
LrSchedulePtr parse_lr_schedule(const std::string& spec, int64_t steps_per_epoch, int64_t total_steps);

// Sets lr = initial_lr * factor(position) on every group of an optimizer.
class LrScheduler {
 public:
  LrScheduler(Optimizer& optimizer, LrSchedulePtr schedule);  // applies position 0
  void step();                                                // after each optimizer step
  int64_t position() const { return position_; }
  void set_position(int64_t position);  // applies it
  const LrSchedule& schedule() const { return *schedule_; }
  // {"position": i64 scalar}, for checkpoints.
  NamedTensors state_dict() const;
  void load_state_dict(const NamedTensors& state);

 private:
  void apply();
  Optimizer& optimizer_;
  LrSchedulePtr schedule_;
  int64_t position_ = 0;
};

}  // namespace optim
}  // namespace tandem
