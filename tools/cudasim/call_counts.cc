// The simulated GPU's counts of host API calls by name and of kernel launches by kernel, read by tests that hold
// a steady-state training step to creating no descriptors, setting no device and growing no pool.
#include <mutex>
#include <string>
#include <unordered_map>

#include "tools/cudasim/sim.h"

namespace cudasim {

namespace {
std::mutex mu;
std::unordered_map<std::string, unsigned long long>& counts() {
  static auto* m = new std::unordered_map<std::string, unsigned long long>();  // outlives static destructors
  return *m;
}
}  // namespace

void count_call(const std::string& name) {
  std::lock_guard<std::mutex> lock(mu);
  ++counts()[name];
}

}  // namespace cudasim

extern "C" {

unsigned long long tandem_cudasim_call_count(const char* name) {
  if (name == nullptr) return 0;
  std::lock_guard<std::mutex> lock(cudasim::mu);
  auto it = cudasim::counts().find(name);
  return it == cudasim::counts().end() ? 0 : it->second;
}

}  // extern "C"
