// The CPU convolution path: the GEMM path's rule first, then whether oneDNN has a kernel, then the plain kernels.
#include "kernels/cpu/nn/conv_path.h"

#include "kernels/cpu/nn/conv_gemm.h"
#include "kernels/cpu/nn/conv_onednn.h"
#include "runtime/base/config.h"

namespace tandem {
namespace cpu {

CpuConvPath select_cpu_conv_path(const Conv2dGeometry& g, ConvPass pass, bool bias) {
  if (g.dtype == DType::BF16)
    return cpu_native_bf16() && onednn_conv_supports(g, pass, bias) ? CpuConvPath::onednn : CpuConvPath::widened;
  if (g.dtype == DType::F32 && cpu_onednn()) {
    if (conv_gemm_applies(g, pass)) return CpuConvPath::gemm;
    if (onednn_conv_supports(g, pass, bias)) return CpuConvPath::onednn;
  }
  return g.c == g.groups ? CpuConvPath::direct : CpuConvPath::im2col;
}

const char* cpu_conv_path_name(CpuConvPath path) {
  switch (path) {
    case CpuConvPath::gemm: return "gemm";
    case CpuConvPath::onednn: return "onednn";
    case CpuConvPath::direct: return "direct";
    case CpuConvPath::im2col: return "im2col";
    case CpuConvPath::widened: return "widened";
  }
  return "?";
}

}  // namespace cpu
}  // namespace tandem
