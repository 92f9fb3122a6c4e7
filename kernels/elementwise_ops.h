// The elementwise formulas of the op table (runtime/tensor/elementwise_table.h) as code for the CPU backend, the
// CUDA kernels and the simulated GPU: a struct per op with its value (and a unary op's derivative), the visit
// functions that pick an op's struct, and the comparisons. A new elementwise op is its row in the table and its
// test case (tests/runtime/op_cases_elementwise.cc); nothing here changes.
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

// Unary ops: value(x) and grad(x, y, g) = d op / dx times g, from x or y as unary_backward_reads says.
#define TD_UNARY(Name, reads, value_expr, grad_expr)                   \
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
TD_UNARY_OPS(TD_UNARY)
#undef TD_UNARY

// Arithmetic binary ops.
#define TD_BINARY(Name, expr)                 \
  struct Name {                               \
    template <typename T>                     \
    static TD_HOST_DEVICE T value(T a, T b) { \
      return expr;                            \
    }                                         \
  };
TD_BINARY_OPS(TD_BINARY)
#undef TD_BINARY
// Comparisons go through compare(); they never reach an arithmetic loop.
struct KeepLeft {
  template <typename T>
  static TD_HOST_DEVICE T value(T a, T) {
    return a;
  }
};

// Calls f with the struct of op (once per call, so that a loop inside f runs without a switch).
#define TD_VISIT(Op, Name, ...) \
  case Op::Name: return f(Name{});

TD_VISIT_EXEC_CHECK
template <typename F>
TD_HOST_DEVICE void visit_unary(UnaryOp op, F&& f) {
  switch (op) {
#define TD_VISIT_UNARY(Name, ...) TD_VISIT(UnaryOp, Name)
    TD_UNARY_OPS(TD_VISIT_UNARY)
#undef TD_VISIT_UNARY
  }
}

TD_VISIT_EXEC_CHECK
template <typename F>
TD_HOST_DEVICE void visit_binary(BinaryOp op, F&& f) {
  switch (op) {
#define TD_VISIT_BINARY(Name, ...) TD_VISIT(BinaryOp, Name)
    TD_BINARY_OPS(TD_VISIT_BINARY)
#undef TD_VISIT_BINARY
    default: return f(KeepLeft{});
  }
}
#undef TD_VISIT

// Comparisons write 0 or 1.
template <typename T>
TD_HOST_DEVICE uint8_t compare(BinaryOp op, T a, T b) {
  switch (op) {
#define TD_COMPARE(Name, expr) \
  case BinaryOp::Name: return expr;
    TD_COMPARISONS(TD_COMPARE)
#undef TD_COMPARE
    default: return 0;
  }
}

}  // namespace elementwise
}  // namespace tandem
