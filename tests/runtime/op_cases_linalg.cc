// Op cases for matmul (2-D, N-D @ 2-D, batched, transposed and strided operands) and linear.
#include "runtime/tensor/ops.h"
#include "tests/runtime/op_cases.h"

namespace tandem {
namespace testing {

namespace {

// How the test hands an operand to matmul: as stored, or a transposed view of a stored transpose.
enum class Layout { Plain, Transposed };

// FLOPs of products summing `k` terms into each output element: a multiply and an add per term.
FlopsFn products_of_depth(int64_t k) {
  return [k](const std::vector<Shape>&, const std::vector<Shape>& out) {
    return 2.0 * shape_elements(out.at(0)) * static_cast<double>(k);
  };
}

// A matmul case of a [.., m, k] @ b [.., k, n]; transposed operands are stored with their last two dims
// swapped and passed as transposed views.
OpCase matmul_case(const std::string& name, Shape a, Layout la, Shape b, Layout lb, bool grad = true) {
  auto stored = [](Shape s, Layout l) {
    if (l == Layout::Transposed) std::swap(s[s.size() - 1], s[s.size() - 2]);
    return s;
  };
  auto as_given = [](const Tensor& t, Layout l) { return l == Layout::Transposed ? t.transpose(-1, -2) : t; };
  auto ref_given = [](const HostTensor& t, Layout l) {
    return l == Layout::Transposed ? ref::transpose(t, -1, -2) : t;
  };
  OpCase c = make_case(
      name, {float_in(stored(a, la)), float_in(stored(b, lb))},
      [=](const TV& in, DType) { return TV{matmul(as_given(in[0], la), as_given(in[1], lb))}; },
      [=](const HV& in) { return HV{ref::matmul(ref_given(in[0], la), ref_given(in[1], lb))}; }, grad);
  c.flops = products_of_depth(a.back());
  // a's dimension 0 is a batch, or m when a is 2-D and stored as given; b's batch goes with a's.
  if (a.size() > 2 || la == Layout::Plain) c.batch_inputs.push_back(0);
  if (a.size() > 2 && b.size() > 2) c.batch_inputs.push_back(1);
  return c;
}

void add_matmul(std::vector<OpCase>& cs) {
  const Layout P = Layout::Plain, T = Layout::Transposed;
  cs.push_back(matmul_case("matmul_2d", {3, 4}, P, {4, 5}, P));
  cs.push_back(matmul_case("matmul_2d_trans_a", {3, 4}, T, {4, 5}, P));
  cs.push_back(matmul_case("matmul_2d_trans_b", {3, 4}, P, {4, 5}, T));
  cs.push_back(matmul_case("matmul_2d_trans_ab", {3, 4}, T, {4, 5}, T));
  cs.push_back(matmul_case("matmul_3d_by_2d", {2, 3, 4}, P, {4, 5}, P));
  cs.push_back(matmul_case("matmul_4d_by_2d", {2, 2, 3, 4}, P, {4, 2}, P));
  cs.push_back(matmul_case("matmul_3d_by_2d_trans_b", {2, 3, 4}, P, {4, 5}, T));
  cs.push_back(matmul_case("matmul_batched", {2, 3, 4}, P, {2, 4, 5}, P));
  cs.push_back(matmul_case("matmul_batched_trans_a", {2, 3, 4}, T, {2, 4, 5}, P));
  cs.push_back(matmul_case("matmul_batched_trans_ab", {2, 3, 4}, T, {2, 4, 5}, T));
  cs.push_back(matmul_case("matmul_outer_k1", {4, 1}, P, {1, 5}, P));
  cs.push_back(matmul_case("matmul_dot_1x6x1", {1, 6}, P, {6, 1}, P));
  // Beyond one micro-tile (6 x 16 floats) in every direction, with ragged edges.
  cs.push_back(matmul_case("matmul_7x20x17", {7, 20}, P, {20, 17}, P));
  // Depth beyond one packed block (256): the GEMM sums two blocks into each output, in f32 for the f32 case.
  cs.push_back(matmul_case("matmul_deep_k300", {7, 300}, P, {300, 17}, T));
  cs.back().tol_f32 = 1e-4;

  // Operands whose strides are neither row- nor column-major (copied before the GEMM).
  cs.push_back(make_case(
      "matmul_stepped_slice", {float_in({3, 8}), float_in({4, 5})},
      [](const TV& in, DType) { return TV{matmul(in[0].slice(1, 0, 8, 2), in[1])}; },
      [](const HV& in) { return HV{ref::matmul(ref::slice(in[0], 1, 0, 8, 2), in[1])}; }));
  cs.back().flops = products_of_depth(4);
  cs.back().batch_inputs = {0};
  cs.push_back(make_case(
      "matmul_permuted_3d_by_2d", {float_in({3, 2, 4}), float_in({4, 5})},
      [](const TV& in, DType) {
        return TV{matmul(in[0].permute({1, 0, 2}), in[1])};
      },
      [](const HV& in) {
        return HV{ref::matmul(ref::permute(in[0], {1, 0, 2}), in[1])};
      }));
  cs.back().flops = products_of_depth(4);
  cs.back().batch_inputs = {0};  // m
  cs.push_back(make_case(
      "matmul_broadcast_batch", {float_in({3, 4}), float_in({2, 4, 5})},
      [](const TV& in, DType) {
        return TV{matmul(in[0].expand({2, 3, 4}), in[1])};
      },
      [](const HV& in) {
        return HV{ref::matmul(ref::broadcast_to(in[0], {2, 3, 4}), in[1])};
      }));
  cs.back().flops = products_of_depth(4);
}

// x @ w^T + b over the last dim of x.
HostTensor linear_ref(const HostTensor& x, const HostTensor& w, const HostTensor* b) {
  HostTensor y = ref::matmul(x.dim() == 1 ? ref::reshape(x, {1, x.shape[0]}) : x, ref::transpose(w, 0, 1));
  if (x.dim() == 1) y = ref::reshape(y, {w.shape[0]});
  if (b) y = ref::zip(y, *b, [](double u, double v) { return u + v; });
  return y;
}

void add_linear(std::vector<OpCase>& cs) {
  const std::pair<const char*, Shape> inputs[] = {{"2d", {3, 4}}, {"1d", {4}}, {"3d", {2, 3, 4}}};
  for (const auto& [suffix, xs] : inputs) {
    std::string s = suffix;
    const std::vector<size_t> batch = xs.size() > 1 ? std::vector<size_t>{0} : std::vector<size_t>{};
    cs.push_back(make_case(
        "linear_bias_" + s, {float_in(xs), float_in({5, 4}), float_in({5})},
        [](const TV& in, DType) { return TV{linear(in[0], in[1], in[2])}; },
        [](const HV& in) { return HV{linear_ref(in[0], in[1], &in[2])}; }));
    cs.back().flops = products_of_depth(4);  // the bias's adds not counted
    cs.back().batch_inputs = batch;
    cs.push_back(make_case(
        "linear_no_bias_" + s, {float_in(xs), float_in({5, 4})},
        [](const TV& in, DType) { return TV{linear(in[0], in[1])}; },
        [](const HV& in) { return HV{linear_ref(in[0], in[1], nullptr)}; }));
    cs.back().flops = products_of_depth(4);
    cs.back().batch_inputs = batch;
  }
}
}  // namespace

std::vector<OpCase> linalg_cases() {
  std::vector<OpCase> cs;
  add_matmul(cs);
  add_linear(cs);
  return cs;
}

}  // namespace testing
}  // namespace tandem
