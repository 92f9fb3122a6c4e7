// Elementwise ops: arithmetic with broadcasting, scalar ops, unary functions, comparisons, where.
#include <cmath>

#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/layout.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

namespace {
using autograd::SavedTensor;

// The output of an elementwise op over `shape`: in the layout of the first operand that is dense with that shape
// (a dense operand's strides win over a broadcast one's, the first operand's over the second's, as in PyTorch),
// else contiguous.
Tensor elementwise_output(const std::vector<Tensor>& operands, const Shape& shape, TensorOptions opts) {
  for (const Tensor& t : operands)
    if (t.shape() == shape && is_dense(t)) return empty_like(t, opts);
  return empty(shape, opts);
}

// t described in `out`'s shape and memory order (out contiguous in that order, as the kernels want it).
StridedDesc desc_in_order(const Tensor& t, const Tensor& out, const std::vector<int>& order) {
  return permute_desc(broadcast_desc(t, out.shape()), order);
}

// out = a op b; out is dense and of the broadcast shape.
void run_binary(BinaryOp op, const Tensor& a, const Tensor& b, const Tensor& out) {
  std::vector<int> order = memory_order(out);
  backend_of(a).binary({op, a.dtype(), a.raw_data(), desc_in_order(a, out, order), b.raw_data(),
                        desc_in_order(b, out, order), out.raw_data(), desc_in_order(out, out, order)},
                       current_stream(a.device()));
}

Tensor binary_forward(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  check_same_device({a, b}, name);
  check_same_dtype({a, b}, name);
  if (!is_comparison(op)) check_float(a, name);
  Shape out_shape = broadcast_shapes(a.shape(), b.shape(), name);
  Tensor out = elementwise_output({a, b}, out_shape, a.options().with_dtype(is_comparison(op) ? DType::U8 : a.dtype()));
  if (out.numel() > 0) run_binary(op, a, b, out);
  return out;
}

// A dense tensor's elements are one flat array in memory, which the unary kernels run over in any layout.
Tensor unary_forward(UnaryOp op, const Tensor& x, UnaryParams p, const char* name) {
  check_float(x, name);
  Tensor xd = is_dense(x) ? x : x.contiguous();
  Tensor y = empty_like(xd);
  if (y.numel() > 0)
    backend_of(x).unary({op, x.dtype(), xd.raw_data(), y.raw_data(), y.numel(), p}, current_stream(x.device()));
  return y;
}

// gy * op'(x), reading the saved operand the op needs (x or y, at most one defined). The gradient comes in gy's
// layout (the saved operand's when gy is a broadcast view); an operand in another layout is copied into it.
Tensor unary_grad(UnaryOp op, const Tensor& x, const Tensor& y, const Tensor& gy, UnaryParams p) {
  const Tensor saved = x.defined() ? x : y;
  Tensor ref = gy;
  if (!is_dense(gy)) ref = saved.defined() && is_dense(saved) ? saved : gy.contiguous();
  Tensor g = in_layout_of(gy, ref), s = saved.defined() ? in_layout_of(saved, ref) : Tensor();
  Tensor gx = empty_like(ref, g.options());
  if (gx.numel() > 0)
    backend_of(g).unary_backward({op, g.dtype(), x.defined() ? s.raw_data() : nullptr,
                                  y.defined() ? s.raw_data() : nullptr, g.raw_data(), gx.raw_data(), gx.numel(), p},
                                 current_stream(g.device()));
  return gx;
}

Tensor unary(UnaryOp op, const Tensor& x, const char* name, UnaryParams p = {}) {
  Tensor y = unary_forward(op, x, p, name);
  if (autograd::any_requires_grad({x})) {
    bool reads_y = unary_backward_reads_output(op), reads_none = unary_backward_reads_nothing(op);
    SavedTensor sx(reads_y || reads_none ? Tensor() : x);
    SavedTensor sy(reads_y ? y : Tensor());
    std::string n = name;
    autograd::record(n, {x}, {y}, [op, p, sx, sy, n](std::vector<Tensor>& g, const std::vector<bool>&) {
      return std::vector<Tensor>{unary_grad(op, sx.unpack(n), sy.unpack(n), g[0], p)};
    });
  }
  return y;
}
}  // namespace

Tensor add(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward(BinaryOp::Add, a, b, "add");
  Shape as = a.shape(), bs = b.shape();
  autograd::record("add", {a, b}, {y}, [as, bs](std::vector<Tensor>& g, const std::vector<bool>& need) {
    return std::vector<Tensor>{need[0] ? sum_to(g[0], as) : Tensor(), need[1] ? sum_to(g[0], bs) : Tensor()};
  });
  return y;
}

Tensor sub(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward(BinaryOp::Sub, a, b, "sub");
  Shape as = a.shape(), bs = b.shape();
  autograd::record("sub", {a, b}, {y}, [as, bs](std::vector<Tensor>& g, const std::vector<bool>& need) {
    return std::vector<Tensor>{need[0] ? sum_to(g[0], as) : Tensor(), need[1] ? sum_to(neg(g[0]), bs) : Tensor()};
  });
  return y;
}

Tensor mul(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward(BinaryOp::Mul, a, b, "mul");
  if (autograd::any_requires_grad({a, b})) {
    SavedTensor sa(b.requires_grad() ? a : Tensor()), sb(a.requires_grad() ? b : Tensor());
    Shape as = a.shape(), bs = b.shape();
    autograd::record("mul", {a, b}, {y}, [sa, sb, as, bs](std::vector<Tensor>& g, const std::vector<bool>& need) {
      return std::vector<Tensor>{need[0] ? sum_to(mul(g[0], sb.unpack("mul")), as) : Tensor(),
                                 need[1] ? sum_to(mul(g[0], sa.unpack("mul")), bs) : Tensor()};
    });
  }
  return y;
}

Tensor div(const Tensor& a, const Tensor& b) {
  Tensor y = binary_forward(BinaryOp::Div, a, b, "div");
  if (autograd::any_requires_grad({a, b})) {
    SavedTensor sa(b.requires_grad() ? a : Tensor()), sb(b);
    Shape as = a.shape(), bs = b.shape();
    autograd::record("div", {a, b}, {y}, [sa, sb, as, bs](std::vector<Tensor>& g, const std::vector<bool>& need) {
      Tensor bv = sb.unpack("div");
      Tensor ga = need[0] ? sum_to(div(g[0], bv), as) : Tensor();
      Tensor gb = need[1] ? sum_to(neg(div(mul(g[0], sa.unpack("div")), mul(bv, bv))), bs) : Tensor();
      return std::vector<Tensor>{ga, gb};
    });
  }
  return y;
}

namespace {
// maximum/minimum: the gradient goes to the chosen input, split evenly on ties.
Tensor extremum(BinaryOp op, const Tensor& a, const Tensor& b, const char* name) {
  Tensor y = binary_forward(op, a, b, name);
  if (autograd::any_requires_grad({a, b})) {
    SavedTensor sa(a), sb(b);
    Shape as = a.shape(), bs = b.shape();
    std::string n = name;
    autograd::record(n, {a, b}, {y}, [op, sa, sb, as, bs, n](std::vector<Tensor>& g, const std::vector<bool>& need) {
      Tensor av = sa.unpack(n), bv = sb.unpack(n);
      Tensor wins = (op == BinaryOp::Maximum ? gt(av, bv) : lt(av, bv)).to(g[0].dtype());
      Tensor ties = eq(av, bv).to(g[0].dtype());
      Tensor wa = add(wins, mul(ties, 0.5));
      Tensor wb = rsub(1.0, wa);
      return std::vector<Tensor>{need[0] ? sum_to(mul(g[0], wa), as) : Tensor(),
                                 need[1] ? sum_to(mul(g[0], wb), bs) : Tensor()};
    });
  }
  return y;
}
}  // namespace

Tensor maximum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::Maximum, a, b, "maximum"); }
Tensor minimum(const Tensor& a, const Tensor& b) { return extremum(BinaryOp::Minimum, a, b, "minimum"); }

Tensor add(const Tensor& a, double b) { return unary(UnaryOp::AddScalar, a, "add_scalar", {b, 0}); }
Tensor sub(const Tensor& a, double b) { return unary(UnaryOp::AddScalar, a, "sub_scalar", {-b, 0}); }
Tensor mul(const Tensor& a, double b) { return unary(UnaryOp::MulScalar, a, "mul_scalar", {b, 0}); }
Tensor div(const Tensor& a, double b) {
  TD_CHECK(b != 0.0, "division of a tensor by the scalar 0");
  return unary(UnaryOp::MulScalar, a, "div_scalar", {1.0 / b, 0});
}
Tensor rsub(double a, const Tensor& b) { return unary(UnaryOp::RSubScalar, b, "rsub_scalar", {a, 0}); }
Tensor rdiv(double a, const Tensor& b) { return unary(UnaryOp::RDivScalar, b, "rdiv_scalar", {a, 0}); }

Tensor eq(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Eq, a, b, "eq"); }
Tensor ne(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Ne, a, b, "ne"); }
Tensor lt(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Lt, a, b, "lt"); }
Tensor le(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Le, a, b, "le"); }
Tensor gt(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Gt, a, b, "gt"); }
Tensor ge(const Tensor& a, const Tensor& b) { return binary_forward(BinaryOp::Ge, a, b, "ge"); }

Tensor neg(const Tensor& x) { return unary(UnaryOp::Neg, x, "neg"); }
Tensor exp(const Tensor& x) { return unary(UnaryOp::Exp, x, "exp"); }
Tensor log(const Tensor& x) { return unary(UnaryOp::Log, x, "log"); }
Tensor sqrt(const Tensor& x) { return unary(UnaryOp::Sqrt, x, "sqrt"); }
Tensor abs(const Tensor& x) { return unary(UnaryOp::Abs, x, "abs"); }
Tensor pow(const Tensor& x, double e) { return unary(UnaryOp::Pow, x, "pow", {e, 0}); }
Tensor relu(const Tensor& x) { return unary(UnaryOp::Relu, x, "relu"); }
Tensor relu6(const Tensor& x) { return unary(UnaryOp::Relu6, x, "relu6"); }
Tensor sigmoid(const Tensor& x) { return unary(UnaryOp::Sigmoid, x, "sigmoid"); }
Tensor tanh(const Tensor& x) { return unary(UnaryOp::Tanh, x, "tanh"); }
Tensor clamp(const Tensor& x, double lo, double hi) {
  TD_CHECK(lo <= hi, "clamp: lower bound ", lo, " exceeds upper bound ", hi);
  return unary(UnaryOp::Clamp, x, "clamp", {lo, hi});
}

Tensor where(const Tensor& cond, const Tensor& a, const Tensor& b) {
  check_same_device({cond, a, b}, "where");
  check_same_dtype({a, b}, "where");
  TD_CHECK_DTYPE(cond.dtype() == DType::U8, "where: the condition must be u8 (from a comparison), got ",
                 dtype_name(cond.dtype()));
  Shape s = broadcast_shapes(broadcast_shapes(cond.shape(), a.shape(), "where"), b.shape(), "where");
  Tensor out = elementwise_output({a, b, cond}, s, a.options());
  if (out.numel() > 0) {
    std::vector<int> order = memory_order(out);
    backend_of(a).where(
        {cond.raw_data(), desc_in_order(cond, out, order), a.dtype(), a.raw_data(), desc_in_order(a, out, order),
         b.raw_data(), desc_in_order(b, out, order), out.raw_data(), desc_in_order(out, out, order)},
        current_stream(a.device()));
  }
  if (autograd::any_requires_grad({a, b})) {
    SavedTensor sc(cond);
    Shape as = a.shape(), bs = b.shape();
    autograd::record("where", {cond, a, b}, {out}, [sc, as, bs](std::vector<Tensor>& g, const std::vector<bool>& need) {
      Tensor c = sc.unpack("where");
      Tensor z = zeros({}, g[0].options());
      return std::vector<Tensor>{Tensor(), need[1] ? sum_to(where(c, g[0], z), as) : Tensor(),
                                 need[2] ? sum_to(where(c, z, g[0]), bs) : Tensor()};
    });
  }
  return out;
}

Tensor masked_fill(const Tensor& x, const Tensor& mask, double value) {
  return where(mask, full({}, value, x.options()), x);
}

Tensor& add_(Tensor& x, const Tensor& y, double alpha) {
  autograd::check_inplace(x, "add_");
  check_same_device({x, y}, "add_");
  check_same_dtype({x, y}, "add_");
  check_float(x, "add_");
  TD_CHECK_SHAPE(broadcast_shapes(x.shape(), y.shape(), "add_") == x.shape(), "add_: ", shape_str(y.shape()),
                 " does not broadcast to the destination's shape ", shape_str(x.shape()));
  autograd::NoGradGuard ng;
  Tensor term = alpha == 1.0 ? y : mul(y, alpha);
  if (!is_dense(x)) {
    x.copy_(add(x, term));
    return x;
  }
  run_binary(BinaryOp::Add, x, term, x);
  x.storage().bump_version();
  return x;
}

Tensor& mul_(Tensor& x, double value) {
  autograd::check_inplace(x, "mul_");
  check_float(x, "mul_");
  if (!is_dense(x)) {
    autograd::NoGradGuard ng;
    x.copy_(mul(x, value));
    return x;
  }
  backend_of(x).unary({UnaryOp::MulScalar, x.dtype(), x.raw_data(), x.raw_data(), x.numel(), {value, 0}},
                      current_stream(x.device()));
  x.storage().bump_version();
  return x;
}

}  // namespace tandem
