// Module gradient checks: the loss, its random weights and the parameters to check.
#include "tests/harness/module_gradients.h"

#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/harness/gradient_check.h"

namespace tandem {
namespace testing {

void expect_module_gradients(models::Module& module, const Tensor& x_in, uint64_t seed, int64_t max_probes) {
  Generator gen(seed);
  Tensor x = x_in.detach().to(DType::F64).contiguous().clone().set_requires_grad(true);
  Tensor w;
  {
    autograd::NoGradGuard ng;
    w = randn(module.output_shape(x.shape()), gen, DType::F64);
  }
  NamedTensors rng = module.rng_state();
  auto loss = [&] {
    module.load_rng_state(rng);
    return sum(mul(module.forward(x), w));
  };
  NamedTensors wrt = {{"input", x}};
  for (const auto& p : module.named_parameters())
    if (p.second.requires_grad()) wrt.push_back(p);
  GradientCheck check;
  check.max_probes = max_probes;
  check.skip_kinks = true;
  check.magnitude_floor = 1;
  // The differences' rounding is about 1e-10 of the loss: far below 1e-7 of a gradient of magnitude 1 or more.
  check.tol = 1e-7;
  expect_gradients_match(loss, wrt, check);
}

}  // namespace testing
}  // namespace tandem
