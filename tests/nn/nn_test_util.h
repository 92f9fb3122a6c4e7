// Helpers of the NN op tests: random inputs, memory-format variants, and finite-difference gradient checks.
#pragma once

#include <functional>
#include <vector>

#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace testing {

// A random normal tensor (f64 unless asked) on the CPU.
Tensor random_input(const Shape& shape, Generator& gen, DType dtype = DType::F64);

// Row-major host values of t as doubles.
std::vector<double> values(const Tensor& t);

// Checks the gradients of L = sum(f(inputs) * r), r a fixed random tensor, against central differences of L
// (each element of each input that requires grad nudged by +-eps), within `tol` relative to the gradient's
// magnitude (compare_values). Inputs are f64 CPU leaves (their earlier gradients are dropped first); f must be
// pure.
void expect_gradients_match(const std::function<Tensor(const std::vector<Tensor>&)>& f,
                            const std::vector<Tensor>& inputs, double tol = 1e-6, double eps = 1e-6);

}  // namespace testing
}  // namespace tandem
