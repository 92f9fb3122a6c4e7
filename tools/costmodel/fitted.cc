// The cost model's constants fitted to calibration.json (24 points, rms log error 0.0764;
// host_op_s: 5 Pipe-BD points, rms log error 0.2737).
// Written by tools/costmodel:fit (calibration.h says how); do not edit: rerun
//   bazel run --config=cudasim //tools/costmodel:fit
#include "tools/costmodel/model.h"

namespace tandem {
namespace costmodel {

const Constants& fitted_constants() {
  static const Constants c = [] {
    Constants k;
    k.kernel_memory = 0.83978160843618355;
    k.collective_cycles = 19.657092815332913;
    k.barrier_cycles = 35.645746251661677;
    k.wavefront_cycles = 6.9079981299560842;
    k.launch_floor_s = 2.0232523780958524e-06;
    k.conv_fwd = 0.23397209271602321;
    k.conv_bwd = 0.16516368158924363;
    k.conv_grouped_fwd = 0.021265807722334881;
    k.conv_grouped_bwd = 0.0072216443635940621;
    k.gemm = 0.80000000000000004;
    k.library_memory = 0.83978160843618355;
    k.link = 0.80000000000000004;
    k.host_op_s = 1.8759463115816601e-05;
    return k;
  }();
  return c;
}

}  // namespace costmodel
}  // namespace tandem
