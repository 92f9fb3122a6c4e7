// The kernels that launch sites name (TD_KERNEL).
#include "kernels/cuda/kernel_registry.h"

#include <mutex>

namespace tandem {
namespace cuda {

namespace {
struct Registry {
  std::mutex mu;
  std::vector<const void*> kernels;
};
// Never destroyed: registrations run at load time, in any order, and reads may come from late threads.
Registry& registry() {
  static auto* r = new Registry();
  return *r;
}
}  // namespace

void register_kernel(const void* fn) {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  r.kernels.push_back(fn);
}

std::vector<const void*> registered_kernels() {
  Registry& r = registry();
  std::lock_guard<std::mutex> lock(r.mu);
  return r.kernels;
}

}  // namespace cuda
}  // namespace tandem
