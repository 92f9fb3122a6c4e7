// Finite-difference gradient checks of modules and losses in f64 on the CPU.
#pragma once

#include <functional>

#include "models/module.h"
#include "runtime/formats/safetensors.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace testing {

// Compares the autograd gradient of the scalar `loss()` with respect to each tensor of `wrt` (f64 CPU leaves
// that require grad) with central differences, probing up to `max_probes` elements per tensor (spread over
// it). EXPECTs |autograd - numeric| <= tol * max(1, |numeric|). A probe whose differences with steps eps and
// eps / 4 disagree sits next to a kink (relu, max) and is skipped; at most a quarter of them may be.
void expect_gradients_match(const std::function<Tensor()>& loss, const NamedTensors& wrt, int max_probes = 16,
                            double eps = 1e-6, double tol = 1e-6);

// A module's gradients with respect to its input and all its parameters, for loss = sum(module(x) * w) with a
// fixed random w. The module must hold f64 parameters; its generator states are restored before each
// evaluation so that random choices (dropout masks, sampled paths) repeat.
void expect_module_gradients(models::Module& module, const Tensor& x, uint64_t seed, int max_probes = 16);

}  // namespace testing
}  // namespace tandem
