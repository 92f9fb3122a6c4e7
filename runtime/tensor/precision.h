// The precision policy: which dtype a thread's convolutions and matrix products compute in, chosen at run time
// (--precision f32|bf16 in the programs; PrecisionGuard in the API). Carried to helper threads by ThreadContext
// and to a run's workers by run_on_workers.
//
// Under bf16, the rounding points (each a round to nearest even into bf16):
//  - conv2d, matmul and linear take bf16 operands: f32 operands (weights, which stay f32 as master copies, and
//    the first layer's input) are rounded to bf16 on the way in; products accumulate in f32 (tensor cores on
//    CUDA, f32 on widened operands on the CPU) and the result is rounded once; a bias is then added and the sum
//    rounded again.
//  - elementwise ops, pooling and dropout on bf16 tensors compute in f32 and round each result once; sums
//    accumulate in f32 and round once; batch norm takes a bf16 input with f32 weight, bias and statistics,
//    computes in f32 and rounds its output (and its input's gradient) once.
//  - softmax, log_softmax and the losses compute in f32 (bf16 inputs are widened, exactly); the optimizer and
//    the master weights stay f32: a weight's gradient is rounded to bf16 by the product that makes it and
//    widened into its f32 leaf.
// f64 tensors are left alone by the policy.
#pragma once

#include <initializer_list>
#include <string>

#include "runtime/base/non_copyable.h"
#include "runtime/tensor/tensor.h"

namespace tandem {

enum class Precision { F32, BF16 };

const char* precision_name(Precision p);  // "f32", "bf16"
// The policy and how `device` carries it out, for a program's first lines.
std::string precision_summary(Precision p, Device device);
Precision parse_precision(const std::string& s);  // inverse of precision_name; throws ValueError

// The calling thread's policy (F32 unless set).
Precision current_precision();
void set_current_precision(Precision p);

// Sets the calling thread's policy while in scope.
class PrecisionGuard : NonCopyable {
 public:
  explicit PrecisionGuard(Precision p) : previous_(current_precision()) { set_current_precision(p); }
  ~PrecisionGuard() { set_current_precision(previous_); }

 private:
  Precision previous_;
};

// Whether a convolution or matrix product of these operands (undefined ones ignored) computes in bf16: the
// policy is bf16 and one of them is f32.
bool lowers_to_bf16(std::initializer_list<const Tensor*> operands);
// t as such a product's operand under bf16: f32 rounded to bf16 (a cast that autograd sees, so that gradients
// reach an f32 leaf in f32), anything else (and undefined) as it is.
Tensor bf16_operand(const Tensor& t);
// The dtype the activations of a model with `weights`-typed parameters have under the policy (after its first
// convolution): bf16 for f32 weights under bf16, the weights' dtype otherwise. What a pipeline stage relays.
DType activation_dtype(DType weights);
// t as the input of an op that computes in f32 (softmax, losses): bf16 widened to f32, anything else as it is.
Tensor f32_input(const Tensor& t);

}  // namespace tandem
