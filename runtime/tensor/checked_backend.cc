// The stream checker's KernelObserver. Operands count as their whole storage: kernels of two streams on disjoint
// parts of one storage would be reported (none exist).
#include "runtime/tensor/checked_backend.h"

#include "runtime/memory/stream_check.h"

namespace tandem {

namespace {

class StreamCheckObserver final : public KernelObserver {
 public:
  void before(const char* method, const Stream& s, const std::vector<Operand>& operands) override {
    std::vector<stream_check::Access> accesses;
    accesses.reserve(operands.size());
    for (const Operand& o : operands) accesses.push_back(stream_check::Access{o.ptr, o.written()});
    stream_check::on_op(method, s, accesses.data(), accesses.size());
  }
};

}  // namespace

KernelObserver& stream_check_observer() {
  static auto* observer = new StreamCheckObserver();  // never destroyed: kernels may run during exit
  return *observer;
}

}  // namespace tandem
