// Weight initializations.
#include "models/init.h"

#include <cmath>

#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"

namespace tandem {
namespace models {
namespace init {

namespace {
int64_t receptive(const Tensor& w) {
  int64_t r = 1;
  for (int64_t d = 2; d < w.dim(); ++d) r *= w.size(d);
  return r;
}
}  // namespace

int64_t fan_in(const Tensor& w) {
  TD_CHECK_SHAPE(w.dim() >= 2, "fan_in needs a weight with at least 2 dims, got ", shape_str(w.shape()));
  return w.size(1) * receptive(w);
}

int64_t fan_out(const Tensor& w) {
  TD_CHECK_SHAPE(w.dim() >= 2, "fan_out needs a weight with at least 2 dims, got ", shape_str(w.shape()));
  return w.size(0) * receptive(w);
}

void kaiming_normal_fan_out(Tensor& w, Generator& gen) {
  normal(w, 0.0, std::sqrt(2.0 / static_cast<double>(fan_out(w))), gen);
}

void default_uniform(Tensor& t, int64_t fan_in, Generator& gen) {
  TD_CHECK(fan_in > 0, "default_uniform needs a positive fan_in, got ", fan_in);
  double bound = 1.0 / std::sqrt(static_cast<double>(fan_in));
  autograd::NoGradGuard ng;
  uniform_(t, -bound, bound, gen);
}

void normal(Tensor& t, double mean, double std, Generator& gen) {
  autograd::NoGradGuard ng;
  normal_(t, mean, std, gen);
}

void constant(Tensor& t, double value) {
  autograd::NoGradGuard ng;
  t.fill_(value);
}

}  // namespace init
}  // namespace models
}  // namespace tandem
