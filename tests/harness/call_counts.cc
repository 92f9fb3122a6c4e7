// CallCounts: observed wrappers of one device type's kernels, registered in their place while it lives.
#include "tests/harness/call_counts.h"

#include "runtime/base/error.h"

namespace tandem {
namespace testing {

CallCounts::CallCounts(DeviceType type)
    : type_(type), kernels_(registered_backend(type)), nn_kernels_(registered_nn_backend(type)) {
  TD_CHECK(kernels_ != nullptr && nn_kernels_ != nullptr, "CallCounts: no kernels registered for the device type");
  watched_ = observe_backend(*kernels_, *this);
  nn_watched_ = observe_nn_backend(*nn_kernels_, *this);
  register_backend(type_, watched_.get());
  register_nn_backend(type_, nn_watched_.get());
}

CallCounts::~CallCounts() {
  register_backend(type_, kernels_);
  register_nn_backend(type_, nn_kernels_);
}

void CallCounts::before(const char* method, const Stream&, const std::vector<Operand>& operands) {
  ++counts_[method];
  for (const Operand& o : operands)
    if (o.ptr != nullptr) bytes_ += static_cast<double>(o.bytes()) * (o.use == OperandUse::Update ? 2 : 1);
}

int CallCounts::of(const std::string& method) const {
  auto it = counts_.find(method);
  return it == counts_.end() ? 0 : it->second;
}

int CallCounts::total() const {
  int sum = 0;
  for (const auto& kv : counts_) sum += kv.second;
  return sum;
}

}  // namespace testing
}  // namespace tandem
