// The precision policy's thread-local state and the casts at its rounding points.
#include "runtime/tensor/precision.h"

#include "runtime/base/config.h"
#include "runtime/base/error.h"

namespace tandem {

namespace {
thread_local Precision tl_precision = Precision::F32;
}  // namespace

const char* precision_name(Precision p) { return p == Precision::BF16 ? "bf16" : "f32"; }

std::string precision_summary(Precision p, Device device) {
  if (p == Precision::F32) return "f32";
  if (device.is_cuda())
    return "bf16 (cuDNN and cuBLAS in bf16 with f32 accumulation; Tandem's kernels load bf16 and compute in f32; "
           "batch norm in f32 on widened bf16)";
  if (cpu_native_bf16())
    return "bf16 (convolutions in oneDNN's native bf16 kernels with f32 accumulation, this processor having "
           "AVX512-BF16; the other ops in f32 arithmetic on bf16 values, rounded at the policy's points)";
  return "bf16 (f32 arithmetic on bf16 values, rounded at the policy's points: this processor has no native bf16, "
         "or oneDNN is off)";
}

Precision parse_precision(const std::string& s) {
  if (s == "f32") return Precision::F32;
  if (s == "bf16") return Precision::BF16;
  TD_THROW(ValueError, "unknown precision '", s, "' (expected f32 or bf16)");
}

Precision current_precision() { return tl_precision; }
void set_current_precision(Precision p) { tl_precision = p; }

bool lowers_to_bf16(std::initializer_list<const Tensor*> operands) {
  if (tl_precision != Precision::BF16) return false;
  for (const Tensor* t : operands)
    if (t->defined() && t->dtype() == DType::F32) return true;
  return false;
}

Tensor bf16_operand(const Tensor& t) { return t.defined() && t.dtype() == DType::F32 ? t.to(DType::BF16) : t; }

DType activation_dtype(DType weights) {
  return tl_precision == Precision::BF16 && weights == DType::F32 ? DType::BF16 : weights;
}

Tensor f32_input(const Tensor& t) { return t.defined() && t.dtype() == DType::BF16 ? t.to(DType::F32) : t; }

}  // namespace tandem
