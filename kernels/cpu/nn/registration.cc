// Registers the CPU NN kernels when this library is linked (alwayslink).
#include "kernels/cpu/nn/cpu_nn_backend.h"

namespace tandem {
namespace cpu {

namespace {
const bool registered = [] {
  static CpuNNBackend backend;
  register_nn_backend(DeviceType::CPU, &backend);
  return true;
}();
}  // namespace

}  // namespace cpu
}  // namespace tandem
