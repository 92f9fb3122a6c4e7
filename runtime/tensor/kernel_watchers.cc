// The registries' observer: the stream checker first (its violations throw before the kernel runs), then the
// profiler, so that the profiler times the kernel alone.
#include "runtime/tensor/kernel_watchers.h"

#include "runtime/tensor/checked_backend.h"

namespace tandem {

namespace {

class KernelWatchers final : public KernelObserver {
 public:
  void before(const char* method, const Stream& s, const std::vector<Operand>& operands) override {
    if (stream_check::enabled()) stream_check_observer().before(method, s, operands);
    if (profiler::active()) profiler::observer().before(method, s, operands);
  }
  void after(const char* method, const Stream& s, const std::vector<Operand>& operands) override {
    profiler::observer().after(method, s, operands);
    stream_check_observer().after(method, s, operands);
  }
};

}  // namespace

KernelObserver& kernel_watchers() {
  static auto* watchers = new KernelWatchers();  // never destroyed: kernels may run during exit
  return *watchers;
}

}  // namespace tandem
