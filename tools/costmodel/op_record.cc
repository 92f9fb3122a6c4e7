// Recording ops by the profiler's op: a device timer of the profiler's interface (profiler.h) that, instead of
// timing, takes the simulator's finished ops before and after each kernel call; the profile then names the op
// of each call.
#include "tools/costmodel/op_record.h"

#include <exception>
#include <memory>
#include <set>
#include <utility>

#include "runtime/base/device.h"
#include "runtime/base/error.h"
#include "runtime/tensor/profiler.h"
#include "tools/costmodel/scaling.h"

namespace tandem {
namespace costmodel {

namespace {

// What the timer hands over: the ops in the order they finished, each with the profiler's call that was open
// then (0: none).
struct Taken {
  Recording* recording = nullptr;
  std::vector<OpCounts> ops;
  std::vector<uint64_t> calls;
};
Taken* g_taken = nullptr;  // set while record_by_op runs

class RecordingTimer final : public profiler::DeviceTimer {
 public:
  explicit RecordingTimer(Taken& taken) : taken_(taken) {}
  const char* name() const override { return "the simulated GPU's cost counters"; }
  // The profiler calls these under its lock, so that open_ needs none.
  void begin_call(uint64_t call) override {
    take();  // work queued outside kernel calls (copies) is not this call's
    open_.push_back(call);
  }
  void end_call() override {
    take();
    if (!open_.empty()) open_.pop_back();
  }
  // One kernel per op, in order (start_ns numbers them), tied to its call.
  std::vector<profiler::DeviceKernel> finish() override {
    take();
    std::vector<profiler::DeviceKernel> kernels;
    for (size_t i = 0; i < taken_.ops.size(); ++i) {
      const int64_t at = static_cast<int64_t>(i);
      kernels.push_back({taken_.ops[i].name, taken_.calls[i], at, at + 1, 0});
    }
    return kernels;
  }

 private:
  void take() {
    for (OpCounts& op : taken_.recording->take()) {
      taken_.calls.push_back(open_.empty() ? 0 : open_.back());
      taken_.ops.push_back(std::move(op));
    }
  }
  Taken& taken_;
  std::vector<uint64_t> open_;
};

std::unique_ptr<profiler::DeviceTimer> make_recording_timer(Device, std::string*) {
  if (g_taken == nullptr) return nullptr;
  return std::make_unique<RecordingTimer>(*g_taken);
}

// Puts the recording timer in place of the CUDA devices' own while it lives; stops a profile left running.
class TimerSwap {
 public:
  explicit TimerSwap(Taken& taken) {
    g_taken = &taken;
    previous_ = profiler::register_device_timer(DeviceType::CUDA, make_recording_timer);
  }
  ~TimerSwap() {
    // Unwinding from work(): the exception in flight says what went wrong, not a failed stop.
    if (!stopped_ && profiler::active()) try {
        profiler::stop();
      } catch (const std::exception&) {
      }
    profiler::register_device_timer(DeviceType::CUDA, previous_);
    g_taken = nullptr;
  }
  profiler::Profile stop() {
    stopped_ = true;
    return profiler::stop();
  }

 private:
  profiler::DeviceTimerFactory previous_ = nullptr;
  bool stopped_ = false;
};

}  // namespace

OpsByOp record_by_op(const std::function<void()>& work, bool dry) {
  TD_CHECK_T(ValueError, !profiler::active(), "recording ops by op needs the profiler, which is already running");
  Recording recording(dry);
  Taken taken;
  taken.recording = &recording;
  profiler::Profile p;
  {
    TimerSwap swap(taken);
    profiler::start({Device::cuda(0)});
    work();
    p = swap.stop();
  }
  TD_CHECK(p.kernels.size() == taken.ops.size(), "the profile has ", p.kernels.size(), " kernels for ",
           taken.ops.size(), " recorded ops");
  OpsByOp by_op;
  for (size_t i = 0; i < taken.ops.size(); ++i) by_op[p.kernels[i].op].push_back(std::move(taken.ops[i]));
  return by_op;
}

OpsByOp extrapolate_by_op(const OpsByOp& at_a, double a, const OpsByOp& at_b, double b, double target) {
  std::set<std::string> names;
  for (const auto& entry : at_a) names.insert(entry.first);
  for (const auto& entry : at_b) names.insert(entry.first);
  OpsByOp out;
  for (const std::string& name : names) {
    auto ia = at_a.find(name), ib = at_b.find(name);
    out[name] = extrapolate(ia == at_a.end() ? std::vector<OpCounts>{} : ia->second, a,
                            ib == at_b.end() ? std::vector<OpCounts>{} : ib->second, b, target);
  }
  return out;
}

std::vector<OpCounts> all_ops(const OpsByOp& by_op) {
  std::vector<OpCounts> ops;
  for (const auto& [name, list] : by_op) ops.insert(ops.end(), list.begin(), list.end());
  return ops;
}

}  // namespace costmodel
}  // namespace tandem
