// A module's gradients (input and parameters) by the tests' finite-difference checker.
#pragma once

#include <cstdint>

#include "models/module.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace testing {

// Checks the gradients of loss = sum(module(x) * w), w a fixed random tensor drawn from `seed`, with respect to
// x and every parameter that requires grad, probing up to `max_probes` elements of each, with kink skipping, a
// magnitude floor of 1 and tol 1e-7 (GradientCheck of gradient_check.h): a tensor is held to 1e-7 of
// max(1, its largest gradient element), within 1e-6 of max(1, |g_i|) for every element g_i at least a tenth of
// that largest. The module must hold f64 parameters; its generator states are restored before each evaluation so
// that random choices (dropout masks, sampled paths) repeat.
void expect_module_gradients(models::Module& module, const Tensor& x, uint64_t seed, int64_t max_probes = 16);

}  // namespace testing
}  // namespace tandem
