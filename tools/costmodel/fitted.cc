// The cost model's constants fitted to calibration.json (24 points, rms log error 0.1054).
// Written by tools/costmodel:fit (calibration.h says how); do not edit: rerun
//   bazel run --config=cudasim //tools/costmodel:fit
#include "tools/costmodel/model.h"

namespace tandem {
namespace costmodel {

const Constants& fitted_constants() {
  static const Constants c = [] {
    Constants k;
    k.kernel_memory = 0.84581818113934037;
    k.collective_cycles = 18.989242091032366;
    k.barrier_cycles = 34.177142824964911;
    k.wavefront_cycles = 7.1759987361479656;
    k.launch_floor_s = 6.1685691565566972e-06;
    k.conv_fwd = 0.24478952353443295;
    k.conv_bwd = 0.1694505944965182;
    k.conv_grouped = 0.0083651914689525948;
    k.gemm = 0.80000000000000004;
    k.library_memory = 0.84581818113934037;
    k.link = 0.80000000000000004;
    return k;
  }();
  return c;
}

}  // namespace costmodel
}  // namespace tandem
