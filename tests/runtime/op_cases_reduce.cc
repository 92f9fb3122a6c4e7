// Op cases for reductions (sum, mean, amax, max, argmax, sum_to) and softmax / log_softmax over each dim.
#include <algorithm>
#include <limits>

#include "runtime/tensor/ops.h"
#include "tests/runtime/op_cases.h"

namespace tandem {
namespace testing {

namespace {
using Dims = std::vector<int64_t>;

std::string dims_name(const Dims& d) {
  if (d.empty()) return "all";
  std::string s = "dims";
  for (int64_t v : d) s += v < 0 ? "_neg" + std::to_string(-v) : "_" + std::to_string(v);
  return s;
}

double plus(double a, double b) { return a + b; }
double larger(double a, double b) { return std::max(a, b); }

void add_sum_mean_amax(std::vector<OpCase>& cs) {
  const Shape x{2, 3, 4};
  const std::pair<Dims, bool> reductions[] = {{{}, false},     {{0}, false}, {{1}, false},       {{-1}, false},
                                              {{0, 2}, false}, {{1}, true},  {{0, 1, 2}, false}, {{2, 0}, true}};
  for (const auto& [dims, keep] : reductions) {
    std::string sfx = "_" + dims_name(dims) + (keep ? "_keepdim" : "");
    Dims d = dims;
    bool k = keep;
    cs.push_back(make_case(
        "sum" + sfx, {float_in(x)}, [d, k](const TV& in, DType) { return TV{sum(in[0], d, k)}; },
        [d, k](const HV& in) { return HV{ref::reduce(in[0], d, k, 0.0, plus)}; }));
    cs.push_back(make_case(
        "mean" + sfx, {float_in(x)}, [d, k](const TV& in, DType) { return TV{mean(in[0], d, k)}; },
        [d, k](const HV& in) {
          HostTensor s = ref::reduce(in[0], d, k, 0.0, plus);
          double n = static_cast<double>(in[0].numel()) / static_cast<double>(s.numel());
          return HV{ref::map(s, [n](double v) { return v / n; })};
        }));
    cs.push_back(make_case(
        "amax" + sfx, {float_in(x, distinct_values())}, [d, k](const TV& in, DType) { return TV{amax(in[0], d, k)}; },
        [d, k](const HV& in) {
          return HV{ref::reduce(in[0], d, k, -std::numeric_limits<double>::infinity(), larger)};
        }));
  }
  // A strided input takes the permute-and-copy path of the reduction.
  cs.push_back(make_case(
      "sum_permuted_input_dims_1", {float_in({3, 2, 4})},
      [](const TV& in, DType) {
        return TV{sum(in[0].permute({1, 0, 2}), {1})};
      },
      [](const HV& in) {
        return HV{ref::reduce(ref::permute(in[0], {1, 0, 2}), {1}, false, 0.0, plus)};
      }));
  cs.push_back(make_case(
      "amax_permuted_input_dims_0", {float_in({3, 2, 4}, distinct_values())},
      [](const TV& in, DType) {
        return TV{amax(in[0].permute({2, 0, 1}), {0})};
      },
      [](const HV& in) {
        return HV{
            ref::reduce(ref::permute(in[0], {2, 0, 1}), {0}, false, -std::numeric_limits<double>::infinity(), larger)};
      }));
}

void add_max_argmax(std::vector<OpCase>& cs) {
  const Shape x{2, 3, 4};
  for (int64_t dim : {0, 1, 2, -1}) {
    for (bool keep : {false, true}) {
      std::string sfx =
          (dim < 0 ? "_dim_neg" + std::to_string(-dim) : "_dim_" + std::to_string(dim)) + (keep ? "_keepdim" : "");
      cs.push_back(make_case(
          "max" + sfx, {float_in(x, distinct_values())},
          [dim, keep](const TV& in, DType) {
            MaxResult r = max(in[0], dim, keep);
            return TV{r.values, r.indices};
          },
          [dim, keep](const HV& in) { return ref::max_along(in[0], dim, keep); }));
      cs.push_back(make_case(
          "argmax" + sfx, {float_in(x, distinct_values())},
          [dim, keep](const TV& in, DType) { return TV{argmax(in[0], dim, keep)}; },
          [dim, keep](const HV& in) { return HV{ref::max_along(in[0], dim, keep)[1]}; }, false));
    }
  }
}

void add_sum_to(std::vector<OpCase>& cs) {
  const std::pair<const char*, Shape> targets[] = {{"sum_to_3x1", {3, 1}},
                                                   {"sum_to_4", {4}},
                                                   {"sum_to_2x1x4", {2, 1, 4}},
                                                   {"sum_to_scalar", {}},
                                                   {"sum_to_same", {2, 3, 4}}};
  for (const auto& [name, target] : targets) {
    Shape t = target;
    cs.push_back(make_case(
        name, {float_in({2, 3, 4})}, [t](const TV& in, DType) { return TV{sum_to(in[0], t)}; },
        [t](const HV& in) { return HV{ref::sum_to(in[0], t)}; }));
    if (t.size() < 3) cs.back().batch_inputs = {0};  // a target of lower rank sums dimension 0 away
  }
}

void add_softmax(std::vector<OpCase>& cs) {
  for (bool log : {false, true}) {
    std::string op = log ? "log_softmax" : "softmax";
    for (int64_t dim : {0, 1, 2, -1}) {
      std::string name = op + (dim < 0 ? "_dim_neg" + std::to_string(-dim) : "_dim_" + std::to_string(dim));
      cs.push_back(make_case(
          name, {float_in({2, 3, 4}, normal_values(2.0))},
          [dim, log](const TV& in, DType) { return TV{log ? log_softmax(in[0], dim) : softmax(in[0], dim)}; },
          [dim, log](const HV& in) { return HV{ref::softmax(in[0], dim, log)}; }));
    }
    cs.push_back(make_case(
        op + "_0d", {float_in({})},
        [log](const TV& in, DType) { return TV{log ? log_softmax(in[0], -1) : softmax(in[0], 0)}; },
        [log](const HV& in) { return HV{ref::map(in[0], [log](double) { return log ? 0.0 : 1.0; })}; }));
    cs.push_back(make_case(
        op + "_1d", {float_in({7}, normal_values(2.0))},
        [log](const TV& in, DType) { return TV{log ? log_softmax(in[0], 0) : softmax(in[0], 0)}; },
        [log](const HV& in) { return HV{ref::softmax(in[0], 0, log)}; }));
    cs.push_back(make_case(
        op + "_transposed_input", {float_in({4, 3}, normal_values(2.0))},
        [log](const TV& in, DType) { return TV{log ? log_softmax(in[0].t(), 1) : softmax(in[0].t(), 1)}; },
        [log](const HV& in) { return HV{ref::softmax(ref::transpose(in[0], 0, 1), 1, log)}; }));
  }
}
}  // namespace

std::vector<OpCase> reduction_cases() {
  std::vector<OpCase> cs;
  add_sum_mean_amax(cs);
  add_max_argmax(cs);
  add_softmax(cs);
  // These reduce or normalize along given dims, whatever the size of dimension 0: the benchmark may scale it.
  for (OpCase& c : cs)
    if (!c.inputs[0].shape.empty()) c.batch_inputs = {0};
  add_sum_to(cs);
  return cs;
}

}  // namespace testing
}  // namespace tandem
