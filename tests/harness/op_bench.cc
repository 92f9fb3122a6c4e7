// The benchmark mode of the op harness: a case's inputs at benchmark size, its calls timed, its bytes and FLOPs.
#include "tests/harness/op_bench.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include "runtime/base/error.h"
#include "runtime/memory/stream.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "tests/harness/call_counts.h"

namespace tandem {
namespace testing {

namespace {

void synchronize(Device d) {
  if (d.is_cuda()) current_stream(d).synchronize();
}

// Seconds per call of `call` on `o.device`: one untimed call, then calls until both minimums are reached, the
// device synchronized after each (so that a queued kernel is timed to its end).
double time_calls(const std::function<void()>& call, const BenchOptions& o, int* reps) {
  call();
  synchronize(o.device);
  using Clock = std::chrono::steady_clock;
  const Clock::time_point start = Clock::now();
  double elapsed = 0;
  int n = 0;
  while (n < o.min_reps || elapsed < o.min_seconds) {
    call();
    synchronize(o.device);
    ++n;
    elapsed = std::chrono::duration<double>(Clock::now() - start).count();
  }
  *reps = n;
  return elapsed / n;
}

double nbytes_of(const std::vector<Tensor>& ts) {
  double b = 0;
  for (const Tensor& t : ts)
    if (t.defined()) b += static_cast<double>(t.nbytes());
  return b;
}

std::vector<Shape> shapes_of(const std::vector<Tensor>& ts) {
  std::vector<Shape> s;
  for (const Tensor& t : ts) s.push_back(t.shape());
  return s;
}

// The case's test-size values, each batch input repeated `factor` times along dimension 0 (in row-major order,
// the whole of its values repeated).
std::vector<HostTensor> bench_values(const OpCase& c, int64_t factor) {
  Generator gen(20261128);
  std::vector<HostTensor> host = draw_inputs(c, gen);
  for (size_t k : c.batch_inputs) {
    HostTensor& h = host.at(k);
    Shape shape = h.shape;
    shape.at(0) *= factor;
    std::vector<double> v;
    v.reserve(h.v.size() * static_cast<size_t>(factor));
    for (int64_t i = 0; i < factor; ++i) v.insert(v.end(), h.v.begin(), h.v.end());
    h = HostTensor(shape, std::move(v));
  }
  return host;
}

std::vector<Tensor> requiring_grad(const std::vector<Tensor>& ts) {
  std::vector<Tensor> r;
  for (const Tensor& t : ts)
    if (t.defined() && t.requires_grad()) r.push_back(t);
  return r;
}

// Forward + backward: each call runs the case on inputs requiring grad and backpropagates ones from its outputs
// that require grad (the inputs' gradients dropped first, so that none accumulates).
BenchResult time_backward(const OpCase& c, const std::vector<HostTensor>& host, const BenchResult& fwd,
                          const BenchOptions& o) {
  std::vector<Tensor> in = make_inputs(c, host, o.dtype, o.device, true);
  std::vector<Tensor> leaves = requiring_grad(in);
  std::vector<Tensor> grads;
  for (const Tensor& y : requiring_grad(c.run(in, o.dtype))) grads.push_back(ones_like(y));
  BenchResult r = fwd;
  r.pass = "forward+backward";
  r.bytes = fwd.bytes + nbytes_of(grads) + nbytes_of(leaves);
  r.flops = 3 * fwd.flops;
  r.seconds = time_calls(
      [&] {
        for (Tensor& t : leaves) t.zero_grad();
        autograd::backward(requiring_grad(c.run(in, o.dtype)), grads);
      },
      o, &r.reps);
  return r;
}
}  // namespace

int64_t batch_factor(const OpCase& c, int64_t elements) {
  if (c.batch_inputs.empty() || elements <= 0) return 1;
  const int64_t n = std::max<int64_t>(1, HostTensor::numel_of(c.inputs.at(c.batch_inputs[0]).shape));
  return std::max<int64_t>(1, (elements + n - 1) / n);
}

std::vector<Shape> bench_shapes(const OpCase& c, int64_t elements) {
  std::vector<Shape> s;
  for (const InputSpec& in : c.inputs) s.push_back(in.shape);
  for (size_t k : c.batch_inputs) s.at(k).at(0) *= batch_factor(c, elements);
  return s;
}

std::vector<BenchResult> bench_case(const OpCase& c, const BenchOptions& o) {
  const std::vector<HostTensor> host = bench_values(c, batch_factor(c, o.elements));
  std::vector<Tensor> in = make_inputs(c, host, o.dtype, o.device, false);
  BenchResult fwd;
  fwd.pass = "forward";
  fwd.shapes = shapes_of(in);
  {
    autograd::NoGradGuard no_grad;
    const std::vector<Tensor> out = c.run(in, o.dtype);
    fwd.bytes = nbytes_of(in) + nbytes_of(out);
    fwd.flops = c.flops ? c.flops(fwd.shapes, shapes_of(out)) : 0.0;
    fwd.seconds = time_calls([&] { c.run(in, o.dtype); }, o, &fwd.reps);
  }
  std::vector<BenchResult> results{fwd};
  if (c.grad) results.push_back(time_backward(c, host, fwd, o));
  return results;
}

Ceilings measure_ceilings(const BenchOptions& o, int64_t copy_elements, int64_t gemm_side) {
  TD_CHECK(copy_elements > 0 && gemm_side > 0, "the ceilings' sizes must be positive");
  const TensorOptions opts = TensorOptions(o.dtype).with_device(o.device);
  Ceilings c;
  int reps = 0;
  Tensor src = ones({copy_elements}, opts), dst = empty({copy_elements}, opts);
  c.bytes_per_s = 2.0 * static_cast<double>(src.nbytes()) / time_calls([&] { dst.copy_(src); }, o, &reps);
  Tensor a = ones({gemm_side, gemm_side}, opts), b = ones({gemm_side, gemm_side}, opts);
  const double flops = 2.0 * static_cast<double>(gemm_side) * gemm_side * gemm_side;
  c.flops_per_s = flops / time_calls([&] { matmul(a, b); }, o, &reps);
  return c;
}

namespace {

Tensor uniform_on(const Shape& shape, DType dtype, Device device, Generator& gen, bool channels_last) {
  Tensor t = empty(shape, TensorOptions(dtype).with_device(device));
  uniform_(t, -2.0, 2.0, gen);
  return channels_last ? to_channels_last(t) : t;
}

// The backward of the node that made `outs` (every float output requiring grad), for gradients of their layout.
std::function<void()> backward_call(const OpCase& c, const std::vector<Tensor>& outs, Generator& gen,
                                    std::vector<Tensor>* operands) {
  std::shared_ptr<autograd::Node> node;
  for (const Tensor& y : outs)
    if (y.defined() && is_floating(y.dtype()) && y.requires_grad()) {
      TD_CHECK(y.grad_fn() != nullptr && (node == nullptr || node == y.grad_fn()), c.name,
               ": the backward pass times one op's backward, and the case's outputs come from several");
      node = y.grad_fn();
    }
  TD_CHECK(node != nullptr, c.name, ": no output requires grad, so it has no backward pass");
  std::vector<Tensor> grads(node->outputs().size());
  for (const Tensor& y : outs)
    if (y.defined() && y.grad_fn() == node) {
      grads.at(static_cast<size_t>(y.output_nr())) = empty_like(y);
      uniform_(grads[static_cast<size_t>(y.output_nr())], -2.0, 2.0, gen);
    }
  for (size_t i = 0; i < grads.size(); ++i)  // the engine's zeros for an output that received no gradient
    if (!grads[i].defined()) {
      const autograd::OutputMeta& m = node->outputs()[i];
      grads[i] = zeros(m.shape, TensorOptions(m.dtype).with_device(m.device));
    }
  operands->insert(operands->end(), grads.begin(), grads.end());
  return [node, grads] {
    autograd::NoGradGuard no_grad;
    std::vector<Tensor> g = grads;
    node->apply(g);
  };
}
}  // namespace

ShapedCall shaped_call(const OpCase& c, const std::vector<Shape>& shapes, Pass pass, Device device, DType dtype,
                       Generator& gen) {
  TD_CHECK(shapes.size() == c.inputs.size(), c.name, ": ", shapes.size(), " shapes for ", c.inputs.size(), " inputs");
  ShapedCall r;
  for (size_t i = 0; i < shapes.size(); ++i) {
    const InputSpec& spec = c.inputs[i];
    TD_CHECK(spec.role == Role::Float, c.name, ": input ", i, " is not floating; a shaped call draws floats only");
    r.operands.push_back(uniform_on(shapes[i], dtype, device, gen, spec.channels_last));
    if (pass == Pass::Backward && spec.grad) r.operands.back().set_requires_grad(true);
  }
  const std::vector<Tensor> in = r.operands;
  if (pass == Pass::Forward) {
    r.call = [c, in, dtype] {
      autograd::NoGradGuard no_grad;
      c.run(in, dtype);
    };
  } else {
    const std::vector<Tensor> outs = c.run(in, dtype);
    r.operands.insert(r.operands.end(), outs.begin(), outs.end());
    r.call = backward_call(c, outs, gen, &r.operands);
  }
  CallCounts counts(device.type);
  r.call();
  synchronize(device);
  r.bytes = counts.bytes();
  return r;
}

Utilisation utilisation(const BenchResult& r, const Ceilings& c) {
  Utilisation u;
  u.compute_bound = r.flops > 0 && r.bytes > 0 && r.flops / r.bytes > c.flops_per_s / c.bytes_per_s;
  u.fraction = u.compute_bound ? r.flops / r.seconds / c.flops_per_s : r.bytes / r.seconds / c.bytes_per_s;
  return u;
}

}  // namespace testing
}  // namespace tandem
