// The steps of prepare_cuda_thread, registered by the CUDA libraries' wrappers.
#include "runtime/memory/cuda_thread.h"

#include <mutex>
#include <vector>

#include "runtime/memory/stream.h"

namespace tandem {

namespace {
std::mutex& setups_mu() {
  static auto* m = new std::mutex();
  return *m;
}
std::vector<CudaThreadSetup>& setups() {
  static auto* v = new std::vector<CudaThreadSetup>();
  return *v;
}
}  // namespace

void register_cuda_thread_setup(CudaThreadSetup setup) {
  std::lock_guard<std::mutex> lock(setups_mu());
  setups().push_back(setup);
}

void prepare_cuda_thread(Device device) {
  if (!device.is_cuda()) return;
  DeviceGuard on_device(device);
  std::vector<CudaThreadSetup> steps;
  {
    std::lock_guard<std::mutex> lock(setups_mu());
    steps = setups();
  }
  for (CudaThreadSetup step : steps) step(device.index);
}

}  // namespace tandem
