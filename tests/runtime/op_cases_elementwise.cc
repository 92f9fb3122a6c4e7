// Op cases for elementwise ops: broadcasting arithmetic, scalar ops, extrema, comparisons, unary functions,
// where, masked_fill, and the in-place add_ / mul_.
#include <cmath>

#include "runtime/tensor/ops.h"
#include "tests/runtime/op_cases.h"

namespace tandem {
namespace testing {

namespace {
using BinaryTensorOp = std::function<Tensor(const Tensor&, const Tensor&)>;
using BinaryRef = std::function<double(double, double)>;
using UnaryTensorOp = std::function<Tensor(const Tensor&)>;
using UnaryRef = std::function<double(double)>;

// An elementwise op's FLOPs: one per output element (the benchmark mode's count).
double one_per_output_element(const std::vector<Shape>&, const std::vector<Shape>& out) {
  return shape_elements(out.at(0));
}

OpCase binary_case(const std::string& name, InputSpec a, InputSpec b, BinaryTensorOp op, BinaryRef f, bool grad = true,
                   std::optional<DType> out_dtype = std::nullopt) {
  OpCase c;
  c.name = name;
  c.inputs = {std::move(a), std::move(b)};
  c.run = [op](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{op(in[0], in[1])}; };
  c.reference = [f, out_dtype](const std::vector<HostTensor>& in) {
    HostTensor y = ref::zip(in[0], in[1], f);
    y.dtype = out_dtype;
    return std::vector<HostTensor>{y};
  };
  c.grad = grad;
  c.flops = one_per_output_element;
  c.batch_inputs = leading_inputs(c.inputs);
  return c;
}

OpCase unary_case(const std::string& name, Shape shape, Sampler sample, UnaryTensorOp op, UnaryRef f) {
  OpCase c;
  c.name = name;
  c.inputs = {float_in(std::move(shape), std::move(sample))};
  c.run = [op](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{op(in[0])}; };
  c.reference = [f](const std::vector<HostTensor>& in) { return std::vector<HostTensor>{ref::map(in[0], f)}; };
  c.flops = one_per_output_element;
  c.batch_inputs = leading_inputs(c.inputs);
  return c;
}

struct ShapePair {
  const char* name;
  Shape a, b;
};
const ShapePair kBroadcasts[] = {
    {"same", {2, 3, 4}, {2, 3, 4}},    {"bcast_inner", {2, 3, 4}, {3, 1}}, {"bcast_lead", {4}, {2, 3, 4}},
    {"bcast_both", {2, 1, 4}, {3, 1}}, {"scalar_tensor", {2, 3}, {}},
};

void add_arithmetic(std::vector<OpCase>& cs) {
  for (const ShapePair& s : kBroadcasts) {
    std::string sfx = std::string("_") + s.name;
    cs.push_back(binary_case(
        "add" + sfx, float_in(s.a), float_in(s.b), [](const Tensor& a, const Tensor& b) { return a + b; },
        [](double a, double b) { return a + b; }));
    cs.push_back(binary_case(
        "sub" + sfx, float_in(s.a), float_in(s.b), [](const Tensor& a, const Tensor& b) { return a - b; },
        [](double a, double b) { return a - b; }));
    cs.push_back(binary_case(
        "mul" + sfx, float_in(s.a), float_in(s.b), [](const Tensor& a, const Tensor& b) { return a * b; },
        [](double a, double b) { return a * b; }));
    cs.push_back(binary_case(
        "div" + sfx, float_in(s.a), float_in(s.b, away_from_zero(0.5, 2.0)),
        [](const Tensor& a, const Tensor& b) { return a / b; }, [](double a, double b) { return a / b; }));
    cs.push_back(binary_case("maximum" + sfx, float_in(s.a), float_in(s.b, avoiding_input(0)), maximum,
                             [](double a, double b) { return std::max(a, b); }));
    cs.push_back(binary_case("minimum" + sfx, float_in(s.a), float_in(s.b, avoiding_input(0)), minimum,
                             [](double a, double b) { return std::min(a, b); }));
  }
  // The same input on both sides: its gradient is the sum of both paths.
  OpCase square;
  square.name = "mul_self";
  square.inputs = {float_in({3, 4})};
  square.run = [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{in[0] * in[0]}; };
  square.reference = [](const std::vector<HostTensor>& in) {
    return std::vector<HostTensor>{ref::map(in[0], [](double x) { return x * x; })};
  };
  cs.push_back(square);
  // Strided operands: a transposed view and a stepped slice.
  OpCase strided;
  strided.name = "add_strided_operands";
  strided.inputs = {float_in({4, 3}), float_in({3, 8})};
  strided.run = [](const std::vector<Tensor>& in, DType) {
    return std::vector<Tensor>{in[0].t() * in[1].slice(1, 0, 8, 2)};
  };
  strided.reference = [](const std::vector<HostTensor>& in) {
    return std::vector<HostTensor>{
        ref::zip(ref::transpose(in[0], 0, 1), ref::slice(in[1], 1, 0, 8, 2), [](double a, double b) { return a * b; })};
  };
  cs.push_back(strided);
}

void add_scalar_ops(std::vector<OpCase>& cs) {
  Shape s{2, 3, 4};
  cs.push_back(unary_case(
      "add_scalar", s, normal_values(), [](const Tensor& x) { return x + 1.5; }, [](double x) { return x + 1.5; }));
  cs.push_back(unary_case(
      "scalar_add", s, normal_values(), [](const Tensor& x) { return 1.5 + x; }, [](double x) { return 1.5 + x; }));
  cs.push_back(unary_case(
      "sub_scalar", s, normal_values(), [](const Tensor& x) { return x - 0.75; }, [](double x) { return x - 0.75; }));
  cs.push_back(unary_case(
      "mul_scalar", s, normal_values(), [](const Tensor& x) { return x * -2.5; }, [](double x) { return x * -2.5; }));
  cs.push_back(unary_case(
      "scalar_mul", s, normal_values(), [](const Tensor& x) { return 3.0 * x; }, [](double x) { return 3.0 * x; }));
  cs.push_back(unary_case(
      "div_scalar", s, normal_values(), [](const Tensor& x) { return x / 4.0; }, [](double x) { return x / 4.0; }));
  cs.push_back(unary_case(
      "rsub_scalar", s, normal_values(), [](const Tensor& x) { return 3.0 - x; }, [](double x) { return 3.0 - x; }));
  cs.push_back(unary_case(
      "rdiv_scalar", s, away_from_zero(0.5, 2.0), [](const Tensor& x) { return 2.0 / x; },
      [](double x) { return 2.0 / x; }));
}

void add_comparisons(std::vector<OpCase>& cs) {
  struct Cmp {
    const char* name;
    BinaryTensorOp op;
    BinaryRef f;
  };
  const Cmp cmps[] = {
      {"eq", eq, [](double a, double b) { return a == b ? 1.0 : 0.0; }},
      {"ne", ne, [](double a, double b) { return a != b ? 1.0 : 0.0; }},
      {"lt", lt, [](double a, double b) { return a < b ? 1.0 : 0.0; }},
      {"le", le, [](double a, double b) { return a <= b ? 1.0 : 0.0; }},
      {"gt", gt, [](double a, double b) { return a > b ? 1.0 : 0.0; }},
      {"ge", ge, [](double a, double b) { return a >= b ? 1.0 : 0.0; }},
  };
  for (const Cmp& c : cmps) {
    std::string n = c.name;
    cs.push_back(
        binary_case(n + "_same", float_in({3, 4}), float_in({3, 4}, sharing_input(0)), c.op, c.f, false, DType::U8));
    cs.push_back(
        binary_case(n + "_bcast", float_in({2, 3, 4}), float_in({4}, sharing_input(0)), c.op, c.f, false, DType::U8));
  }
  cs.push_back(binary_case("lt_int64", index_in({3, 4}, 4), index_in({4}, 4), lt, cmps[2].f, false, DType::U8));
  cs.push_back(binary_case("eq_int64", index_in({3, 4}, 3), index_in({3, 4}, 3), eq, cmps[0].f, false, DType::U8));
}

void add_unary(std::vector<OpCase>& cs) {
  Shape s{2, 3, 4};
  cs.push_back(unary_case("neg", s, normal_values(), neg, [](double x) { return -x; }));
  cs.push_back(unary_case("exp", s, normal_values(), exp, [](double x) { return std::exp(x); }));
  cs.push_back(unary_case("log", s, positive(0.2, 3.0), log, [](double x) { return std::log(x); }));
  cs.push_back(unary_case("sqrt", s, positive(0.2, 3.0), sqrt, [](double x) { return std::sqrt(x); }));
  cs.push_back(unary_case("abs", s, away_from_zero(), abs, [](double x) { return std::abs(x); }));
  cs.push_back(unary_case(
      "pow_2", s, normal_values(), [](const Tensor& x) { return pow(x, 2.0); }, [](double x) { return x * x; }));
  cs.push_back(unary_case(
      "pow_3", s, normal_values(), [](const Tensor& x) { return pow(x, 3.0); }, [](double x) { return x * x * x; }));
  cs.push_back(unary_case(
      "pow_0_5", s, positive(), [](const Tensor& x) { return pow(x, 0.5); }, [](double x) { return std::sqrt(x); }));
  cs.push_back(unary_case(
      "pow_neg1_5", s, positive(), [](const Tensor& x) { return pow(x, -1.5); },
      [](double x) { return 1.0 / (x * std::sqrt(x)); }));
  cs.push_back(unary_case("relu", s, away_from_zero(0.1, 2.0), relu, [](double x) { return x > 0 ? x : 0.0; }));
  cs.push_back(unary_case("relu6", s, avoiding({0.0, 6.0}, -2.0, 8.0), relu6,
                          [](double x) { return std::min(std::max(x, 0.0), 6.0); }));
  cs.push_back(
      unary_case("sigmoid", s, normal_values(2.0), sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }));
  cs.push_back(unary_case("tanh", s, normal_values(), tanh, [](double x) { return std::tanh(x); }));
  cs.push_back(unary_case(
      "clamp", s, avoiding({-0.5, 0.7}, -2.0, 2.0), [](const Tensor& x) { return clamp(x, -0.5, 0.7); },
      [](double x) { return std::min(std::max(x, -0.5), 0.7); }));
  cs.push_back(
      unary_case("sigmoid_0d", {}, normal_values(), sigmoid, [](double x) { return 1.0 / (1.0 + std::exp(-x)); }));
  // A strided input: the op reads a permuted view.
  OpCase strided;
  strided.name = "tanh_permuted_input";
  strided.inputs = {float_in({3, 4, 2})};
  strided.run = [](const std::vector<Tensor>& in, DType) {
    return std::vector<Tensor>{tanh(in[0].permute({2, 0, 1}))};
  };
  strided.reference = [](const std::vector<HostTensor>& in) {
    return std::vector<HostTensor>{ref::map(ref::permute(in[0], {2, 0, 1}), [](double x) { return std::tanh(x); })};
  };
  cs.push_back(strided);
}

void add_selection(std::vector<OpCase>& cs) {
  struct WhereShapes {
    const char* name;
    Shape cond, a, b;
  };
  const WhereShapes shapes[] = {{"where_same", {2, 3, 4}, {2, 3, 4}, {2, 3, 4}},
                                {"where_bcast", {3, 1}, {2, 3, 4}, {4}},
                                {"where_bcast_cond", {2, 3, 4}, {3, 4}, {}}};
  for (const WhereShapes& s : shapes) {
    OpCase c;
    c.name = s.name;
    c.inputs = {mask_in(s.cond), float_in(s.a), float_in(s.b)};
    c.run = [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{where(in[0], in[1], in[2])}; };
    c.reference = [](const std::vector<HostTensor>& in) {
      return std::vector<HostTensor>{ref::select_where(in[0], in[1], in[2])};
    };
    c.batch_inputs = leading_inputs(c.inputs);
    cs.push_back(c);
  }
  for (Shape mask : {Shape{2, 3, 4}, Shape{3, 1}}) {
    OpCase c;
    c.name = mask.size() == 3 ? "masked_fill_same" : "masked_fill_bcast";
    c.inputs = {float_in({2, 3, 4}), mask_in(mask)};
    c.run = [](const std::vector<Tensor>& in, DType) { return std::vector<Tensor>{masked_fill(in[0], in[1], -1.5)}; };
    c.reference = [](const std::vector<HostTensor>& in) {
      return std::vector<HostTensor>{ref::zip(in[0], in[1], [](double x, double m) { return m != 0 ? -1.5 : x; })};
    };
    c.batch_inputs = leading_inputs(c.inputs);
    cs.push_back(c);
  }
}
// add_ and mul_ on a copy of the input (they record no graph), contiguous and through a strided view.
void add_inplace(std::vector<OpCase>& cs) {
  cs.push_back(make_case(
      "add_inplace_alpha_bcast", {float_in({2, 3, 4}), float_in({3, 4})},
      [](const TV& in, DType) {
        Tensor x = in[0].clone();
        add_(x, in[1], -0.5);
        return TV{x};
      },
      [](const HV& in) { return HV{ref::zip(in[0], in[1], [](double a, double b) { return a - 0.5 * b; })}; }, false));
  cs.push_back(make_case(
      "add_inplace_strided", {float_in({4, 3}), float_in({3, 4})},
      [](const TV& in, DType) {
        Tensor base = in[0].clone();
        Tensor x = base.t();
        add_(x, in[1]);
        return TV{base};
      },
      [](const HV& in) {
        return HV{ref::zip(in[0], ref::transpose(in[1], 0, 1), [](double a, double b) { return a + b; })};
      },
      false));
  cs.push_back(make_case(
      "mul_inplace", {float_in({2, 3, 4})},
      [](const TV& in, DType) {
        Tensor x = in[0].clone();
        mul_(x, 1.5);
        return TV{x};
      },
      [](const HV& in) { return HV{ref::map(in[0], [](double a) { return 1.5 * a; })}; }, false));
  cs.push_back(make_case(
      "mul_inplace_strided", {float_in({3, 4})},
      [](const TV& in, DType) {
        Tensor base = in[0].clone();
        Tensor x = base.slice(1, 0, 4, 2);
        mul_(x, -2.0);
        return TV{base};
      },
      [](const HV& in) {
        HostTensor y = in[0];
        for (int64_t i = 0; i < y.numel(); ++i)
          if (i % 2 == 0) y.v[i] *= -2.0;
        return HV{y};
      },
      false));
}
}  // namespace

std::vector<OpCase> elementwise_cases() {
  std::vector<OpCase> cs;
  add_arithmetic(cs);
  add_scalar_ops(cs);
  add_comparisons(cs);
  add_unary(cs);
  add_selection(cs);
  add_inplace(cs);
  return cs;
}

}  // namespace testing
}  // namespace tandem
