// Generator bookkeeping and the random tensor factories.
#include "runtime/tensor/rng.h"

#include "runtime/base/error.h"
#include "runtime/base/philox.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

uint64_t Generator::advance(int64_t n) {
  uint64_t first = offset_;
  offset_ += static_cast<uint64_t>((n + 3) / 4);
  return first;
}

double Generator::uniform() {
  philox::Block b = philox::generate(seed_, advance(1));
  return philox::uniform32(b.x[0]);
}

uint64_t Generator::integer(uint64_t n) {
  TD_CHECK(n > 0, "Generator::integer needs a positive bound");
  philox::Block b = philox::generate(seed_, advance(4));
  uint64_t v = (static_cast<uint64_t>(b.x[0]) << 32) | b.x[1];
  return v % n;
}

namespace {
Tensor& fill_random(Tensor& x, RandomSpec spec, Generator& gen) {
  autograd::check_inplace(x, spec.normal ? "normal_" : "uniform_");
  check_float(x, spec.normal ? "normal_" : "uniform_");
  Tensor target = x.is_contiguous() ? x : empty(x.shape(), x.options());
  if (x.numel() > 0) {
    uint64_t offset = gen.advance(x.numel());
    backend_of(x).random({x.dtype(), target.raw_data(), x.numel(), gen.seed(), offset, spec},
                         current_stream(x.device()));
  }
  if (!target.same(x)) {
    autograd::NoGradGuard ng;
    x.copy_(target);
  } else {
    x.storage().bump_version();
  }
  return x;
}

Tensor make_random(const Shape& shape, RandomSpec spec, Generator& gen, TensorOptions opts) {
  bool rg = opts.requires_grad;
  Tensor t = empty(shape, opts.with_requires_grad(false));
  fill_random(t, spec, gen);
  if (rg) t.set_requires_grad(true);
  return t;
}
}  // namespace

Tensor& uniform_(Tensor& x, double lo, double hi, Generator& gen) {
  TD_CHECK(lo <= hi, "uniform_: lower bound ", lo, " exceeds upper bound ", hi);
  return fill_random(x, RandomSpec{false, lo, hi}, gen);
}
Tensor& normal_(Tensor& x, double mean, double std, Generator& gen) {
  TD_CHECK(std >= 0, "normal_: negative standard deviation ", std);
  return fill_random(x, RandomSpec{true, mean, std}, gen);
}
Tensor rand(const Shape& shape, Generator& gen, TensorOptions opts) {
  return make_random(shape, RandomSpec{false, 0, 1}, gen, opts);
}
Tensor randn(const Shape& shape, Generator& gen, TensorOptions opts) {
  return make_random(shape, RandomSpec{true, 0, 1}, gen, opts);
}
Tensor uniform(const Shape& shape, double lo, double hi, Generator& gen, TensorOptions opts) {
  TD_CHECK(lo <= hi, "uniform: lower bound ", lo, " exceeds upper bound ", hi);
  return make_random(shape, RandomSpec{false, lo, hi}, gen, opts);
}
Tensor normal(const Shape& shape, double mean, double std, Generator& gen, TensorOptions opts) {
  TD_CHECK(std >= 0, "normal: negative standard deviation ", std);
  return make_random(shape, RandomSpec{true, mean, std}, gen, opts);
}

}  // namespace tandem
