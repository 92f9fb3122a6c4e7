// The elementwise formulas, written once for the CPU backend, the CUDA kernels and the simulated GPU: each
// unary op's value and derivative, each binary op and comparison, with their NaN rules. A new elementwise op is
// its enum value (runtime/tensor/backend.h), a struct here with its formula and derivative, its line in the visit
// function, and its test case (tests/runtime/op_cases_elementwise.cc).
#pragma once

#include <cmath>
#include <cstdint>

#include "runtime/base/hostdevice.h"
#include "runtime/tensor/backend.h"

// A visit function is host-and-device code that calls what it is given: a device-only lambda in a kernel.
#if defined(__CUDACC__)
#define TD_VISIT_EXEC_CHECK _Pragma("nv_exec_check_disable")
#else
#define TD_VISIT_EXEC_CHECK
#endif

namespace tandem {
namespace elementwise {

// Math in the element's own precision: expf for floats (the CPU's std::exp(float) is expf too).
TD_HOST_DEVICE float exp_of(float x) { return expf(x); }
TD_HOST_DEVICE double exp_of(double x) { return exp(x); }
TD_HOST_DEVICE float log_of(float x) { return logf(x); }
TD_HOST_DEVICE double log_of(double x) { return log(x); }
TD_HOST_DEVICE float sqrt_of(float x) { return sqrtf(x); }
TD_HOST_DEVICE double sqrt_of(double x) { return sqrt(x); }
TD_HOST_DEVICE float tanh_of(float x) { return tanhf(x); }
TD_HOST_DEVICE double tanh_of(double x) { return tanh(x); }
TD_HOST_DEVICE float abs_of(float x) { return fabsf(x); }
TD_HOST_DEVICE double abs_of(double x) { return fabs(x); }
TD_HOST_DEVICE float pow_of(float x, float a) { return powf(x, a); }
TD_HOST_DEVICE double pow_of(double x, double a) { return pow(x, a); }

// A unary op's scalar parameters in the element type.
template <typename T>
struct Scalars {
  T a, b, a_minus_1;
};
template <typename T>
TD_HOST_DEVICE Scalars<T> scalars_of(const UnaryParams& p) {
  return {static_cast<T>(p.a), static_cast<T>(p.b), static_cast<T>(p.a - 1)};
}

// Unary ops: value(x) and grad(x, y, g) = d op / dx times g, from x or y as unary_backward_reads_output says.
#define TD_UNARY(Name, value_expr, grad_expr)                          \
  struct Name {                                                        \
    template <typename T>                                              \
    static TD_HOST_DEVICE T value(T x, const Scalars<T>& s) {          \
      (void)s;                                                         \
      return value_expr;                                               \
    }                                                                  \
    template <typename T>                                              \
    static TD_HOST_DEVICE T grad(T x, T y, T g, const Scalars<T>& s) { \
      (void)x, (void)y, (void)s;                                       \
      return grad_expr;                                                \
    }                                                                  \
  };

// The tables below keep their formulas as written (clang-format would space them as macro arguments).
// clang-format off
TD_UNARY(Neg, -x, -g)
TD_UNARY(Exp, exp_of(x), g * y)
TD_UNARY(Log, log_of(x), g / x)
TD_UNARY(Sqrt, sqrt_of(x), g / (T(2) * y))
TD_UNARY(Relu, x < T(0) ? T(0) : x, y > T(0) ? g : T(0))  // NaN propagates
TD_UNARY(Relu6, x < T(0) ? T(0) : (x > T(6) ? T(6) : x), (y > T(0) && y < T(6)) ? g : T(0))
TD_UNARY(Sigmoid, T(1) / (T(1) + exp_of(-x)), g * y * (T(1) - y))
TD_UNARY(Tanh, tanh_of(x), g * (T(1) - y * y))
TD_UNARY(Abs, abs_of(x), x > T(0) ? g : (x < T(0) ? -g : T(0)))
TD_UNARY(Pow, pow_of(x, s.a), g * s.a * pow_of(x, s.a_minus_1))
TD_UNARY(Clamp, x < s.a ? s.a : (x > s.b ? s.b : x), (x >= s.a && x <= s.b) ? g : T(0))
TD_UNARY(AddScalar, x + s.a, g)
TD_UNARY(MulScalar, x * s.a, g * s.a)
TD_UNARY(RSubScalar, s.a - x, -g)
TD_UNARY(RDivScalar, s.a / x, -g * s.a / (x * x))
// clang-format on
#undef TD_UNARY

// Calls f with the struct of op (once per call, so that a loop inside f runs without a switch).
TD_VISIT_EXEC_CHECK
template <typename F>
TD_HOST_DEVICE void visit_unary(UnaryOp op, F&& f) {
  switch (op) {
    case UnaryOp::Neg: return f(Neg{});
    case UnaryOp::Exp: return f(Exp{});
    case UnaryOp::Log: return f(Log{});
    case UnaryOp::Sqrt: return f(Sqrt{});
    case UnaryOp::Relu: return f(Relu{});
    case UnaryOp::Relu6: return f(Relu6{});
    case UnaryOp::Sigmoid: return f(Sigmoid{});
    case UnaryOp::Tanh: return f(Tanh{});
    case UnaryOp::Abs: return f(Abs{});
    case UnaryOp::Pow: return f(Pow{});
    case UnaryOp::Clamp: return f(Clamp{});
    case UnaryOp::AddScalar: return f(AddScalar{});
    case UnaryOp::MulScalar: return f(MulScalar{});
    case UnaryOp::RSubScalar: return f(RSubScalar{});
    case UnaryOp::RDivScalar: return f(RDivScalar{});
  }
}

// Arithmetic binary ops. Maximum/Minimum propagate NaN: a NaN in a wins, and a NaN in b fails the comparison,
// so b is picked.
#define TD_BINARY(Name, expr)                 \
  struct Name {                               \
    template <typename T>                     \
    static TD_HOST_DEVICE T value(T a, T b) { \
      (void)b;                                \
      return expr;                            \
    }                                         \
  };

// clang-format off
TD_BINARY(Add, a + b)
TD_BINARY(Sub, a - b)
TD_BINARY(Mul, a * b)
TD_BINARY(Div, a / b)
TD_BINARY(Maximum, (a != a || a > b) ? a : b)
TD_BINARY(Minimum, (a != a || a < b) ? a : b)
TD_BINARY(KeepLeft, a)  // comparisons go through compare(); they never reach an arithmetic loop
// clang-format on
#undef TD_BINARY

TD_VISIT_EXEC_CHECK
template <typename F>
TD_HOST_DEVICE void visit_binary(BinaryOp op, F&& f) {
  switch (op) {
    case BinaryOp::Add: return f(Add{});
    case BinaryOp::Sub: return f(Sub{});
    case BinaryOp::Mul: return f(Mul{});
    case BinaryOp::Div: return f(Div{});
    case BinaryOp::Maximum: return f(Maximum{});
    case BinaryOp::Minimum: return f(Minimum{});
    default: return f(KeepLeft{});
  }
}

// Comparisons write 0 or 1.
template <typename T>
TD_HOST_DEVICE uint8_t compare(BinaryOp op, T a, T b) {
  switch (op) {
    case BinaryOp::Eq: return a == b;
    case BinaryOp::Ne: return a != b;
    case BinaryOp::Lt: return a < b;
    case BinaryOp::Le: return a <= b;
    case BinaryOp::Gt: return a > b;
    case BinaryOp::Ge: return a >= b;
    default: return 0;
  }
}

}  // namespace elementwise
}  // namespace tandem
