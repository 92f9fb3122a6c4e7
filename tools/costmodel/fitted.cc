// The cost model's constants fitted to calibration.json (24 points, rms log error 0.1040).
// Written by tools/costmodel:fit (calibration.h says how); do not edit: rerun
//   bazel run --config=cudasim //tools/costmodel:fit
#include "tools/costmodel/model.h"

namespace tandem {
namespace costmodel {

const Constants& fitted_constants() {
  static const Constants c = [] {
    Constants k;
    k.kernel_memory = 0.82861137032864995;
    k.collective_cycles = 19.887126654778218;
    k.barrier_cycles = 37.414583353102294;
    k.wavefront_cycles = 6.5602450714813454;
    k.launch_floor_s = 4.9999999999999998e-07;
    k.conv_fwd = 0.23209895616195855;
    k.conv_bwd = 0.16401695472787065;
    k.conv_grouped = 0.011856757239739621;
    k.gemm = 0.80000000000000004;
    k.library_memory = 0.82861137032864995;
    k.link = 0.80000000000000004;
    return k;
  }();
  return c;
}

}  // namespace costmodel
}  // namespace tandem
