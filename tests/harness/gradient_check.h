// The tests' one finite-difference gradient checker: autograd's gradients against central differences.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "runtime/formats/safetensors.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace testing {

// The rule, for each tensor checked: over its checked elements i,
//   max_i |autograd_i - numeric_i| <= tol * max(magnitude_floor, max_i |numeric_i|)
// (compare_values of tests/testing.h: the error relative to the gradient's magnitude), numeric_i being the
// central difference (L(x + step e_i) - L(x - step e_i)) / (2 step) in f64. Its truncation error (of order
// step^2) and rounding (about 1e-16 of L over the step) both sit far below 1e-6 of the gradient's magnitude
// at the default step, so a wrong gradient element larger than that fails.
struct GradientCheck {
  double tol = 1e-6;
  double step = 1e-6;
  // A module's loss sums many outputs, and one of its tensors may have a gradient near zero (a batch norm's
  // weight feeding another train-mode batch norm): the differences' rounding, of the loss's scale, is then
  // no longer small against that gradient, so module checks hold such a tensor to tol absolutely (floor 1).
  double magnitude_floor = 0;
  // Elements checked per tensor, spread evenly over it from first to last (0: every element): for modules
  // with many parameters, where every element would cost two evaluations of the whole module.
  int64_t max_probes = 0;
  // For inputs drawn without keeping away from kinks (relu, max): an element whose differences with steps
  // `step` and step / 4 disagree by more than the rule allows straddles a kink and is
  // skipped; at most a quarter of the probes (at least one) may be. A wrong gradient makes both steps agree
  // on a value autograd does not give, so it is still caught.
  bool skip_kinks = false;
};

// The core: `autograd[k]` (row-major) against central differences of `loss`, a pure function of the values of
// the tensors of `wrt` (f64 CPU tensors of any strides, nudged in place one element at a time and restored;
// `loss` runs with autograd off).
void expect_finite_differences(const std::function<double()>& loss, const NamedTensors& wrt,
                               const std::vector<std::vector<double>>& autograd, const GradientCheck& check = {});

// For a scalar `loss()`: drops the earlier gradients of `wrt` (f64 CPU leaves; those not requiring grad and
// undefined ones are left out), backpropagates once, and checks every gradient as above.
void expect_gradients_match(const std::function<Tensor()>& loss, const NamedTensors& wrt,
                            const GradientCheck& check = {});

// For a tensor-valued f: L = sum(f(inputs) * r) with r a fresh random tensor, with respect to the inputs that
// require grad (named "input 0", "input 1", ...).
void expect_gradients_match(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            const std::vector<Tensor>& inputs, const GradientCheck& check = {});

}  // namespace testing
}  // namespace tandem
