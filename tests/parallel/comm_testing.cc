// Helpers for the communicator tests.
#include "tests/parallel/comm_testing.h"

#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace testing {

void run_local(int n, const std::function<void(Worker&, Communicator&)>& fn, MessageMatching matching) {
  std::vector<Worker> workers = make_workers("cpu:" + std::to_string(n));
  std::vector<std::shared_ptr<Communicator>> comms = make_local_group(workers, matching);
  run_on_workers(workers, [&](Worker& w) { fn(w, *comms[w.rank]); });
}

Tensor rank_input(uint64_t seed, int rank, const Shape& shape, DType dtype, Device device) {
  Generator gen(seed * 1000003ull + static_cast<uint64_t>(rank) + 1);
  Tensor t;
  if (is_floating(dtype)) {
    t = randn(shape, gen, TensorOptions(DType::F64)).to(dtype);
  } else {
    std::vector<int64_t> v(static_cast<size_t>(shape_numel(shape)));
    for (auto& x : v) x = static_cast<int64_t>(gen.integer(50));
    t = from_vector(v, shape, Device::cpu()).to(dtype);
  }
  return t.to(device);
}

Tensor rank_order_sum_reference(const std::vector<Tensor>& inputs, double scale) {
  const DType dtype = inputs[0].dtype();
  const Shape shape = inputs[0].shape();
  const size_t n = static_cast<size_t>(inputs[0].numel());
  if (dtype == DType::F64) {
    std::vector<double> acc = inputs[0].to_vector<double>();
    for (size_t r = 1; r < inputs.size(); ++r) {
      std::vector<double> x = inputs[r].to_vector<double>();
      for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + x[i];
    }
    if (scale != 1.0)
      for (auto& a : acc) a = a * scale;
    return from_vector(acc, shape, Device::cpu());
  }
  if (is_floating(dtype)) {
    std::vector<float> acc = inputs[0].to_vector<float>();
    for (size_t r = 1; r < inputs.size(); ++r) {
      std::vector<float> x = inputs[r].to_vector<float>();
      for (size_t i = 0; i < n; ++i) acc[i] = acc[i] + x[i];
    }
    if (scale != 1.0)
      for (auto& a : acc) a = static_cast<float>(static_cast<double>(a) * scale);
    return from_vector(acc, shape, Device::cpu()).to(dtype);
  }
  std::vector<int64_t> acc = inputs[0].to_vector<int64_t>();
  for (size_t r = 1; r < inputs.size(); ++r) {
    std::vector<int64_t> x = inputs[r].to_vector<int64_t>();
    for (size_t i = 0; i < n; ++i) acc[i] += x[i];
  }
  return from_vector(acc, shape, Device::cpu()).to(dtype);
}

std::vector<double> exact_sum(const std::vector<Tensor>& inputs, double scale) {
  std::vector<double> acc(static_cast<size_t>(inputs[0].numel()), 0.0);
  for (const Tensor& t : inputs) {
    std::vector<double> x = t.to_vector<double>();
    for (size_t i = 0; i < acc.size(); ++i) acc[i] += x[i];
  }
  for (auto& a : acc) a *= scale;
  return acc;
}

void expect_ring_with_tags(Communicator& c, uint64_t seed, const std::vector<Shape>& shapes,
                           const std::vector<DType>& dtypes) {
  const int next = (c.rank() + 1) % c.size(), prev = (c.rank() + c.size() - 1) % c.size();
  std::vector<Request> sent;
  for (size_t k = 0; k < shapes.size(); ++k)
    sent.push_back(c.isend(rank_input(seed + k, c.rank(), shapes[k], dtypes[k]), next, static_cast<int>(k)));
  for (size_t k = shapes.size(); k-- > 0;) {
    Tensor got = zeros(shapes[k], dtypes[k]);
    c.recv(got, prev, static_cast<int>(k));
    tandem::testing::expect_bitwise_equal(got, rank_input(seed + k, prev, shapes[k], dtypes[k]),
                                          "tag " + std::to_string(k));
  }
  for (Request& r : sent) r.wait();
}

}  // namespace testing
}  // namespace parallel
}  // namespace tandem
