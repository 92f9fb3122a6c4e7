// The op harness's input samplers and its forward, finite-difference and CUDA-vs-CPU checks.
#include "tests/harness/op_harness.h"

#include <algorithm>
#include <cmath>

#include "runtime/base/config.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "tests/harness/gradient_check.h"
#include "tests/harness/write_check.h"

namespace tandem {
namespace testing {

namespace {
constexpr double kPi = 3.14159265358979323846;

double draw_normal(Generator& gen) {
  double u1 = 1.0 - gen.uniform(), u2 = gen.uniform();
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * kPi * u2);
}

double draw_uniform(Generator& gen, double lo, double hi) { return lo + (hi - lo) * gen.uniform(); }

bool near_any(double v, const std::vector<double>& points, double gap) {
  for (double p : points)
    if (std::abs(v - p) < gap) return true;
  return false;
}
}  // namespace

Sampler normal_values(double stddev) {
  return [stddev](Generator& gen, int64_t n, const std::vector<HostTensor>&) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = stddev * draw_normal(gen);
    return v;
  };
}

Sampler uniform_values(double lo, double hi) {
  return [lo, hi](Generator& gen, int64_t n, const std::vector<HostTensor>&) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = draw_uniform(gen, lo, hi);
    return v;
  };
}

Sampler avoiding(std::vector<double> points, double lo, double hi, double gap) {
  return [points, lo, hi, gap](Generator& gen, int64_t n, const std::vector<HostTensor>&) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) {
      do {
        x = draw_uniform(gen, lo, hi);
      } while (near_any(x, points, gap));
    }
    return v;
  };
}

Sampler away_from_zero(double lo, double hi) {
  return [lo, hi](Generator& gen, int64_t n, const std::vector<HostTensor>&) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = (gen.uniform() < 0.5 ? -1.0 : 1.0) * draw_uniform(gen, lo, hi);
    return v;
  };
}

Sampler positive(double lo, double hi) { return uniform_values(lo, hi); }

Sampler grid_values(double step, double lo, double hi) {
  return [step, lo, hi](Generator& gen, int64_t n, const std::vector<HostTensor>&) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = lo + step * std::floor(draw_uniform(gen, 0, (hi - lo) / step));
    return v;
  };
}

Sampler distinct_values() {
  return [](Generator& gen, int64_t n, const std::vector<HostTensor>&) {
    std::vector<double> v(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) v[i] = (static_cast<double>(i) - 0.5 * n) * 0.25 + 0.05 * gen.uniform();
    for (int64_t i = n - 1; i > 0; --i) std::swap(v[i], v[gen.integer(static_cast<uint64_t>(i + 1))]);
    return v;
  };
}

Sampler avoiding_input(int k, double lo, double hi, double gap) {
  return [k, lo, hi, gap](Generator& gen, int64_t n, const std::vector<HostTensor>& earlier) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) {
      do {
        x = draw_uniform(gen, lo, hi);
      } while (near_any(x, earlier.at(k).v, gap));
    }
    return v;
  };
}

Sampler sharing_input(int k) {
  return [k](Generator& gen, int64_t n, const std::vector<HostTensor>& earlier) {
    const std::vector<double>& src = earlier.at(k).v;
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = gen.uniform() < 0.5 ? src[gen.integer(src.size())] : draw_normal(gen);
    return v;
  };
}

Sampler indices(int64_t bound) {
  return [bound](Generator& gen, int64_t n, const std::vector<HostTensor>&) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = static_cast<double>(gen.integer(static_cast<uint64_t>(bound)));
    return v;
  };
}

Sampler coin_flips() {
  return [](Generator& gen, int64_t n, const std::vector<HostTensor>&) {
    std::vector<double> v(static_cast<size_t>(n));
    for (double& x : v) x = gen.uniform() < 0.5 ? 0.0 : 1.0;
    return v;
  };
}

InputSpec float_in(Shape shape, Sampler sample, bool grad) {
  return InputSpec{std::move(shape), std::move(sample), Role::Float, grad};
}
InputSpec in_channels_last(InputSpec s) {
  s.channels_last = s.shape.size() == 4;
  return s;
}
InputSpec index_in(Shape shape, int64_t bound) {
  return InputSpec{std::move(shape), indices(bound), Role::Int64, false};
}
InputSpec mask_in(Shape shape) { return InputSpec{std::move(shape), coin_flips(), Role::Mask, false}; }

OpCase make_case(std::string name, std::vector<InputSpec> inputs, OpFn run, RefFn reference, bool grad) {
  OpCase c;
  c.name = std::move(name);
  c.inputs = std::move(inputs);
  c.run = std::move(run);
  c.reference = std::move(reference);
  c.grad = grad;
  return c;
}

std::vector<size_t> leading_inputs(const std::vector<InputSpec>& inputs) {
  size_t rank = 0;
  int64_t lead = 0;
  for (const InputSpec& s : inputs) rank = std::max(rank, s.shape.size());
  for (const InputSpec& s : inputs)
    if (s.shape.size() == rank && rank > 0) lead = std::max(lead, s.shape[0]);
  std::vector<size_t> k;
  for (size_t i = 0; i < inputs.size() && rank > 0; ++i)
    if (inputs[i].shape.size() == rank && inputs[i].shape[0] == lead) k.push_back(i);
  return k;
}

double shape_elements(const Shape& s) { return static_cast<double>(HostTensor::numel_of(s)); }

// Floats are rounded through f32 so that f32 and f64 runs see the same numbers.
std::vector<HostTensor> draw_inputs(const OpCase& c, Generator& gen) {
  std::vector<HostTensor> host;
  for (const InputSpec& s : c.inputs) {
    std::vector<double> v = s.sample(gen, HostTensor::numel_of(s.shape), host);
    if (s.role == Role::Float)
      for (double& x : v) x = static_cast<double>(static_cast<float>(x));
    host.emplace_back(s.shape, std::move(v));
  }
  return host;
}

namespace {
Tensor make_input(const InputSpec& s, const HostTensor& h, DType dtype, Device device, bool requires_grad) {
  Tensor t;
  if (s.role == Role::Float) {
    t = from_vector<double>(h.v, h.shape, Device::cpu()).to(dtype);
  } else if (s.role == Role::Int64) {
    t = from_vector<int64_t>(std::vector<int64_t>(h.v.begin(), h.v.end()), h.shape, Device::cpu());
  } else {
    t = from_vector<uint8_t>(std::vector<uint8_t>(h.v.begin(), h.v.end()), h.shape, Device::cpu());
  }
  t = t.to(device);
  if (s.channels_last) t = to_channels_last(t);
  if (requires_grad && s.role == Role::Float && s.grad) t.set_requires_grad(true);
  return t;
}
}  // namespace

std::vector<Tensor> make_inputs(const OpCase& c, const std::vector<HostTensor>& host, DType dtype, Device device,
                                bool requires_grad) {
  std::vector<Tensor> in;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    in.push_back(make_input(c.inputs[i], host[i], dtype, device, requires_grad));
  return in;
}

namespace {

// EXPECTs that `got` matches `want` in shape, dtype and values (within tol, see compare_values).
void expect_matches(const Tensor& got, const std::vector<double>& want, const Shape& shape, DType dtype, double tol,
                    const std::string& what) {
  ASSERT_TRUE(got.defined()) << what << ": undefined output";
  ASSERT_EQ(shape_str(got.shape()), shape_str(shape)) << what << ": wrong shape";
  EXPECT_EQ(dtype_name(got.dtype()), std::string(dtype_name(dtype))) << what << ": wrong dtype";
  std::vector<double> g = got.to_vector<double>();
  ASSERT_EQ(g.size(), want.size()) << what;
  const Discrepancy d = compare_values(g, want);
  EXPECT_LE(d.error, tol) << what << ": element " << d.at << " is " << g[d.at] << ", expected " << want[d.at]
                          << " (relative error " << d.error << ")";
}

// Runs the case and EXPECTs its inputs bitwise as they were: an op writes only its outputs.
std::vector<Tensor> run_keeping_inputs(const OpCase& c, const std::vector<Tensor>& in, DType dtype) {
  std::vector<Tensor> before;
  for (const Tensor& t : in) before.push_back(t.clone());
  std::vector<Tensor> outs = c.run(in, dtype);
  for (size_t i = 0; i < in.size(); ++i)
    expect_bitwise_equal(in[i], before[i],
                         c.name + ": input " + std::to_string(i) + " changed by the op on " + in[i].device().str());
  return outs;
}

// Relative to the output's magnitude (compare_values): an f32 op rounds its result, and its inputs' products and
// partial sums, to about 6e-8 of that magnitude; the CPU accumulates in double, so 1e-5 (some 170 such roundings)
// fails any wrong element larger than 1e-5 of the largest. f64 results are held to 1e-12 unless a case says.
double forward_tol(const OpCase& c, DType dtype) { return dtype == DType::F32 ? c.tol_f32 : c.tol_f64; }

std::vector<Tensor> float_outputs(const std::vector<Tensor>& outs) {
  std::vector<Tensor> f;
  for (const Tensor& t : outs)
    if (is_compute_float(t.dtype())) f.push_back(t);
  return f;
}

// sum_i sum(out_i * w_i) over the float outputs, in double on the host.
double projection(const std::vector<Tensor>& outs, const std::vector<std::vector<double>>& w) {
  std::vector<Tensor> f = float_outputs(outs);
  double s = 0;
  for (size_t i = 0; i < f.size(); ++i) {
    std::vector<double> v = f[i].to_vector<double>();
    for (size_t j = 0; j < v.size(); ++j) s += v[j] * w[i][j];
  }
  return s;
}

// Runs `c` with the float inputs requiring grad (only input `only` when >= 0) and backpropagates `w`.
// Returns the inputs (their .grad holds the result).
std::vector<Tensor> autograd_run(const OpCase& c, const std::vector<HostTensor>& host, DType dtype, Device device,
                                 const std::vector<std::vector<double>>& w, int only = -1) {
  std::vector<Tensor> in = make_inputs(c, host, dtype, device, false);
  for (size_t i = 0; i < in.size(); ++i)
    if (c.inputs[i].role == Role::Float && c.inputs[i].grad && (only < 0 || only == static_cast<int>(i)))
      in[i].set_requires_grad(true);
  std::vector<Tensor> outs = float_outputs(c.run(in, dtype));
  std::vector<Tensor> roots, grads;
  for (size_t i = 0; i < outs.size(); ++i) {
    EXPECT_TRUE(outs[i].requires_grad()) << c.name << ": float output " << i << " does not require grad";
    if (!outs[i].requires_grad()) continue;
    roots.push_back(outs[i]);
    grads.push_back(from_vector<double>(w[i], outs[i].shape(), Device::cpu()).to(outs[i].dtype()).to(device));
  }
  if (!roots.empty()) autograd::backward(roots, grads);
  return in;
}

std::vector<size_t> grad_inputs(const OpCase& c) {
  std::vector<size_t> k;
  for (size_t i = 0; i < c.inputs.size(); ++i)
    if (c.inputs[i].role == Role::Float && c.inputs[i].grad) k.push_back(i);
  return k;
}

// Normal weights rounded to f32, so that an output of either float dtype receives exactly these as its gradient.
std::vector<std::vector<double>> draw_weights(const std::vector<Tensor>& outs, Generator& gen) {
  std::vector<std::vector<double>> w;
  for (const Tensor& t : float_outputs(outs)) {
    w.push_back(normal_values()(gen, t.numel(), {}));
    for (double& v : w.back()) v = static_cast<float>(v);
  }
  return w;
}
}  // namespace

void check_forward(const OpCase& c, DType dtype) {
  WriteCheck write_check;
  Generator gen(fresh_seed());
  std::vector<HostTensor> host = draw_inputs(c, gen);
  std::vector<Tensor> in = make_inputs(c, host, dtype, Device::cpu(), false);
  std::vector<HostTensor> seen;  // the values the op sees (f64 copies of the converted inputs)
  for (const Tensor& t : in) seen.emplace_back(t.shape(), t.to_vector<double>());
  std::vector<Tensor> outs = run_keeping_inputs(c, in, dtype);
  std::vector<HostTensor> want = c.reference(seen);
  ASSERT_EQ(outs.size(), want.size()) << c.name << ": number of outputs";
  for (size_t i = 0; i < outs.size(); ++i) {
    DType expected = want[i].dtype.value_or(dtype);
    EXPECT_EQ(outs[i].device(), Device::cpu());
    double tol = is_compute_float(expected) ? forward_tol(c, dtype) : 0.0;
    expect_matches(outs[i], want[i].v, want[i].shape, expected, tol,
                   c.name + " output " + std::to_string(i) + " in " + dtype_name(dtype));
  }
}

void check_gradient(const OpCase& c) {
  ASSERT_TRUE(c.grad) << c.name << " has no gradient";
  WriteCheck write_check;
  Generator gen(fresh_seed());
  std::vector<HostTensor> host = draw_inputs(c, gen);
  std::vector<Tensor> probe = c.run(make_inputs(c, host, DType::F64, Device::cpu(), false), DType::F64);
  std::vector<std::vector<double>> w = draw_weights(probe, gen);
  ASSERT_FALSE(w.empty()) << c.name << ": no floating output to differentiate";
  std::vector<size_t> ks = grad_inputs(c);
  ASSERT_FALSE(ks.empty()) << c.name << ": no input to differentiate with respect to";

  std::vector<Tensor> in = autograd_run(c, host, DType::F64, Device::cpu(), w);
  std::vector<Tensor> nudged = make_inputs(c, host, DType::F64, Device::cpu(), false);  // the differences' inputs
  NamedTensors wrt;
  std::vector<std::vector<double>> analytic;
  for (size_t k : ks) {
    Tensor g = in[k].grad();
    ASSERT_TRUE(g.defined()) << c.name << ": input " << k << " received no gradient";
    ASSERT_EQ(g.shape(), in[k].shape()) << c.name << ": gradient shape of input " << k;
    EXPECT_EQ(g.dtype(), DType::F64);
    wrt.emplace_back(c.name + ": d/d(input " + std::to_string(k) + ")", nudged[k]);
    analytic.push_back(g.to_vector<double>());
  }
  GradientCheck check;
  check.step = c.fd_step;
  expect_finite_differences([&] { return projection(c.run(nudged, DType::F64), w); }, wrt, analytic, check);

  // Each input alone requiring grad takes the paths that skip the other inputs' gradients.
  if (ks.size() > 1) {
    for (size_t k : ks) {
      std::vector<Tensor> single = autograd_run(c, host, DType::F64, Device::cpu(), w, static_cast<int>(k));
      for (size_t other : ks) {
        if (other != k) {
          EXPECT_FALSE(single[other].grad().defined()) << c.name << ": input " << other;
        }
      }
      ASSERT_TRUE(single[k].grad().defined()) << c.name << ": input " << k << " alone received no gradient";
      expect_close(single[k].grad(), in[k].grad(), 1e-12, c.name + ": input " + std::to_string(k) + " alone");
    }
  }

  // The f32 backward kernels, against the f64 gradients at the same (f32-representable) inputs: a backward
  // chains a few f32 ops (each within forward_tol), hence 1e-4 of the gradient's magnitude.
  std::vector<Tensor> in32 = autograd_run(c, host, DType::F32, Device::cpu(), w);
  for (size_t k : ks) {
    ASSERT_TRUE(in32[k].grad().defined()) << c.name << ": f32 input " << k << " received no gradient";
    EXPECT_EQ(in32[k].grad().dtype(), DType::F32);
    expect_close(in32[k].grad(), in[k].grad(), 1e-4, c.name + ": f32 gradient of input " + std::to_string(k));
  }
}

void check_cuda_matches_cpu(const OpCase& c, DType dtype) {
  NumericsGuard tf32_off(false, deterministic());
  WriteCheck write_check;
  Generator gen(fresh_seed());
  std::vector<HostTensor> host = draw_inputs(c, gen);
  Device gpu = Device::cuda(0);
  std::vector<Tensor> cpu_out = run_keeping_inputs(c, make_inputs(c, host, dtype, Device::cpu(), false), dtype);
  std::vector<Tensor> gpu_out = run_keeping_inputs(c, make_inputs(c, host, dtype, gpu, false), dtype);
  ASSERT_EQ(cpu_out.size(), gpu_out.size()) << c.name;
  for (size_t i = 0; i < cpu_out.size(); ++i) {
    EXPECT_EQ(gpu_out[i].device(), gpu) << c.name << " output " << i;
    double tol = is_compute_float(cpu_out[i].dtype()) ? forward_tol(c, dtype) : 0.0;
    expect_matches(gpu_out[i], cpu_out[i].to_vector<double>(), cpu_out[i].shape(), cpu_out[i].dtype(), tol,
                   c.name + " output " + std::to_string(i) + " on CUDA in " + dtype_name(dtype));
  }
  if (!c.grad) return;
  std::vector<std::vector<double>> w = draw_weights(cpu_out, gen);
  std::vector<Tensor> cpu_in = autograd_run(c, host, dtype, Device::cpu(), w);
  std::vector<Tensor> gpu_in = autograd_run(c, host, dtype, gpu, w);
  for (size_t k : grad_inputs(c)) {
    ASSERT_TRUE(gpu_in[k].grad().defined()) << c.name << ": no CUDA gradient for input " << k;
    EXPECT_EQ(gpu_in[k].grad().device(), gpu);
    expect_close(gpu_in[k].grad(), cpu_in[k].grad(), dtype == DType::F32 ? 10 * c.tol_f32 : 1e-10,
                 c.name + ": CUDA gradient of input " + std::to_string(k));
  }
}

std::string case_name(const ::testing::TestParamInfo<OpCase>& info) { return info.param.name; }

void PrintTo(const OpCase& c, std::ostream* os) {
  *os << c.name << " (inputs:";
  for (const InputSpec& s : c.inputs) *os << " " << shape_str(s.shape);
  *os << ")";
}

}  // namespace testing
}  // namespace tandem
