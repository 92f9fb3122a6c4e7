// Learning-rate schedules, their spec parser and the scheduler.
#include "runtime/optim/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/base/spec_reader.h"
#include "runtime/tensor/whole_number.h"

namespace tandem {
namespace optim {

namespace {

class Constant : public LrSchedule {
 public:
  double factor(int64_t) const override { return 1.0; }
  std::string describe() const override { return "constant"; }
};

class Step : public LrSchedule {
 public:
  Step(int64_t size, double gamma) : size_(size), gamma_(gamma) {}
  double factor(int64_t step) const override { return std::pow(gamma_, static_cast<double>(step / size_)); }
  std::string describe() const override { return detail::concat("step(every ", size_, " steps, gamma ", gamma_, ")"); }

 private:
  int64_t size_;
  double gamma_;
};

class MultiStep : public LrSchedule {
 public:
  MultiStep(std::vector<int64_t> milestones, double gamma) : milestones_(std::move(milestones)), gamma_(gamma) {}
  double factor(int64_t step) const override {
    auto passed = std::upper_bound(milestones_.begin(), milestones_.end(), step) - milestones_.begin();
    return std::pow(gamma_, static_cast<double>(passed));
  }
  std::string describe() const override {
    std::ostringstream os;
    os << "multistep(at";
    for (int64_t m : milestones_) os << " " << m;
    os << " steps, gamma " << gamma_ << ")";
    return os.str();
  }

 private:
  std::vector<int64_t> milestones_;
  double gamma_;
};

class Cosine : public LrSchedule {
 public:
  Cosine(int64_t total, double min) : total_(total), min_(min) {}
  double factor(int64_t step) const override {
    double t = static_cast<double>(std::min(step, total_)) / static_cast<double>(total_);
    return min_ + (1.0 - min_) * 0.5 * (1.0 + std::cos(M_PI * t));
  }
  std::string describe() const override {
    return detail::concat("cosine(over ", total_, " steps, min factor ", min_, ")");
  }

 private:
  int64_t total_;
  double min_;
};

class Warmup : public LrSchedule {
 public:
  Warmup(int64_t steps, double start, LrSchedulePtr after) : steps_(steps), start_(start), after_(std::move(after)) {}
  double factor(int64_t step) const override {
    if (step >= steps_) return after_->factor(step - steps_);
    double ramp = start_ + (1.0 - start_) * static_cast<double>(step) / static_cast<double>(steps_);
    return ramp * after_->factor(0);
  }
  std::string describe() const override {
    return detail::concat("warmup(", steps_, " steps from ", start_, ") + ", after_->describe());
  }

 private:
  int64_t steps_;
  double start_;
  LrSchedulePtr after_;
};

const char* kGrammar =
    "constant | step:EPOCHS[:GAMMA] | multistep:E1,E2,...[:GAMMA] | cosine[:MIN_FACTOR] | "
    "warmup:EPOCHS[:START_FACTOR]+<schedule>";

// Epochs (fractions allowed) as a whole number of steps.
int64_t epochs_to_steps(const SpecReader& r, const std::string& text, int64_t steps_per_epoch) {
  // Steps beyond 2^62 are no schedule anyone runs, and the product must stay within int64.
  const double max_epochs = std::ldexp(1.0, 62) / static_cast<double>(steps_per_epoch);
  const double e = r.finite("epochs", text, 0, max_epochs);
  return static_cast<int64_t>(std::llround(e * static_cast<double>(steps_per_epoch)));
}

}  // namespace

LrSchedulePtr constant_lr() { return std::make_shared<Constant>(); }

LrSchedulePtr step_lr(int64_t step_size, double gamma) {
  TD_CHECK(step_size > 0, "step_lr needs a positive step size, got ", step_size);
  TD_CHECK(gamma > 0, "step_lr needs a positive gamma, got ", gamma);
  return std::make_shared<Step>(step_size, gamma);
}

LrSchedulePtr multistep_lr(std::vector<int64_t> milestones, double gamma) {
  TD_CHECK(gamma > 0, "multistep_lr needs a positive gamma, got ", gamma);
  TD_CHECK(!milestones.empty(), "multistep_lr needs at least one milestone");
  TD_CHECK(std::is_sorted(milestones.begin(), milestones.end()), "multistep_lr: milestones must be increasing");
  return std::make_shared<MultiStep>(std::move(milestones), gamma);
}

LrSchedulePtr cosine_lr(int64_t total_steps, double min_factor) {
  TD_CHECK(total_steps > 0, "cosine_lr needs a positive number of steps, got ", total_steps);
  TD_CHECK(min_factor >= 0 && min_factor <= 1, "cosine_lr: min factor must be in [0, 1], got ", min_factor);
  return std::make_shared<Cosine>(total_steps, min_factor);
}

LrSchedulePtr warmup_lr(int64_t warmup_steps, double start_factor, LrSchedulePtr after) {
  TD_CHECK(warmup_steps > 0, "warmup_lr needs a positive number of steps, got ", warmup_steps);
  TD_CHECK(start_factor >= 0 && start_factor <= 1, "warmup_lr: start factor must be in [0, 1], got ", start_factor);
  TD_CHECK(after != nullptr, "warmup_lr needs a schedule to follow the warm-up");
  return std::make_shared<Warmup>(warmup_steps, start_factor, std::move(after));
}

LrSchedulePtr parse_lr_schedule(const std::string& spec, int64_t steps_per_epoch, int64_t total_steps) {
  TD_CHECK(steps_per_epoch > 0, "parse_lr_schedule needs a positive number of steps per epoch");
  const SpecReader r("learning-rate schedule", spec, kGrammar);
  std::string rest = spec;
  int64_t warm = 0;
  double start = 0.1;
  if (rest.rfind("warmup:", 0) == 0) {
    const size_t plus = rest.find('+');
    if (plus == std::string::npos) r.fail("a warm-up needs a schedule after '+'");
    const std::vector<std::string> w = r.items(rest.substr(7, plus - 7), ':');
    if (w.empty() || w.size() > 2) r.fail("a warm-up takes EPOCHS[:START_FACTOR]");
    warm = epochs_to_steps(r, w[0], steps_per_epoch);
    if (w.size() == 2) start = r.finite("start factor", w[1]);
    if (warm <= 0) r.fail("the warm-up is shorter than one step");
    rest = rest.substr(plus + 1);
  }
  const std::vector<std::string> f = r.items(rest, ':');
  const std::string kind = f.empty() ? "" : f[0];
  auto factor = [&](const char* name, size_t i, double fallback) {
    return f.size() > i ? r.finite(name, f[i]) : fallback;
  };
  LrSchedulePtr s;
  if (kind == "constant" && f.size() == 1) {
    s = constant_lr();
  } else if (kind == "step" && (f.size() == 2 || f.size() == 3)) {
    const int64_t size = epochs_to_steps(r, f[1], steps_per_epoch);
    if (size <= 0) r.fail("the step is shorter than one step");
    s = step_lr(size, factor("gamma", 2, 0.1));
  } else if (kind == "multistep" && (f.size() == 2 || f.size() == 3)) {
    std::vector<int64_t> ms;
    for (const std::string& m : r.items(f[1], ',')) ms.push_back(epochs_to_steps(r, m, steps_per_epoch));
    if (!std::is_sorted(ms.begin(), ms.end())) r.fail("milestones must be increasing");
    s = multistep_lr(ms, factor("gamma", 2, 0.1));
  } else if (kind == "cosine" && f.size() <= 2) {
    const int64_t span = total_steps - warm;
    if (span <= 0) r.fail("no steps are left for the cosine after the warm-up");
    s = cosine_lr(span, factor("min factor", 1, 0.0));
  } else {
    r.fail("unknown schedule '", rest, "'");
  }
  return warm > 0 ? warmup_lr(warm, start, s) : s;
}

LrScheduler::LrScheduler(Optimizer& optimizer, LrSchedulePtr schedule)
    : optimizer_(optimizer), schedule_(std::move(schedule)) {
  TD_CHECK(schedule_ != nullptr, "LrScheduler needs a schedule");
  apply();
}

void LrScheduler::apply() {
  double f = schedule_->factor(position_);
  for (size_t g = 0; g < optimizer_.num_groups(); ++g) optimizer_.set_lr(g, optimizer_.initial_lr(g) * f);
}

void LrScheduler::step() {
  ++position_;
  apply();
}

void LrScheduler::set_position(int64_t position) {
  TD_CHECK(position >= 0, "LrScheduler: the position must be non-negative, got ", position);
  position_ = position;
  apply();
}

NamedTensors LrScheduler::state_dict() const {
  return {{"position",
           scalar_tensor(static_cast<double>(position_), TensorOptions(DType::I64).with_device(Device::cpu()))}};
}

void LrScheduler::load_state_dict(const NamedTensors& state) {
  TD_CHECK(state.size() == 1 && state[0].first == "position" && state[0].second.numel() == 1,
           "LrScheduler state must be exactly {\"position\": one number}");
  set_position(whole_number(state[0].second, "LrScheduler state \"position\""));
}

}  // namespace optim
}  // namespace tandem
