// Weight initializations of PyTorch and torchvision, drawn from a seeded Generator (in place, no autograd).
#pragma once

#include "runtime/tensor/rng.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace models {
namespace init {

// Fans of a weight [out, in, k...]: fan_in = in * receptive field, fan_out = out * receptive field.
int64_t fan_in(const Tensor& w);
int64_t fan_out(const Tensor& w);

// normal(0, sqrt(2 / fan_out)): torchvision's kaiming_normal_(mode="fan_out", nonlinearity="relu").
void kaiming_normal_fan_out(Tensor& w, Generator& gen);
// uniform(±1/sqrt(fan_in)): PyTorch's default for Linear and Conv weights (kaiming_uniform_ with a=√5)
// and for their biases (with the weight's fan_in).
void default_uniform(Tensor& t, int64_t fan_in, Generator& gen);
void normal(Tensor& t, double mean, double std, Generator& gen);
void constant(Tensor& t, double value);

}  // namespace init
}  // namespace models
}  // namespace tandem
