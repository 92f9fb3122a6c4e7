// The elementwise op table: one row per op, the single place an elementwise op is defined. Its rows become the
// UnaryOp/BinaryOp enums and what each unary backward reads (runtime/tensor/backend.h), the formulas that the CPU
// backend, the CUDA kernels and the simulated GPU run (kernels/elementwise_ops.h) and the op lists of the kernel
// tests. The formula columns are expanded in kernels/elementwise_ops.h, where T is the element type, s the op's
// scalars (s.a, s.b, s.a_minus_1) and exp_of, log_of, ... the math functions in that precision.
#pragma once

// clang-format off

// X(Name, reads, value(x), d value / dx times g): `reads` is the operand the backward needs, Output (y), Input (x)
// or Nothing; the front end saves only that one.
#define TD_UNARY_OPS(X)                                                                              \
  X(Neg, Nothing, -x, -g)                                                                            \
  X(Exp, Output, exp_of(x), g * y)                                                                   \
  X(Log, Input, log_of(x), g / x)                                                                    \
  X(Sqrt, Output, sqrt_of(x), g / (T(2) * y))                                                        \
  X(Relu, Output, x < T(0) ? T(0) : x, y > T(0) ? g : T(0)) /* NaN propagates */                     \
  X(Relu6, Output, x < T(0) ? T(0) : (x > T(6) ? T(6) : x), (y > T(0) && y < T(6)) ? g : T(0))       \
  X(Sigmoid, Output, T(1) / (T(1) + exp_of(-x)), g * y * (T(1) - y))                                 \
  X(Tanh, Output, tanh_of(x), g * (T(1) - y * y))                                                    \
  X(Abs, Input, abs_of(x), x > T(0) ? g : (x < T(0) ? -g : T(0)))                                    \
  X(Pow, Input, pow_of(x, s.a), g * s.a * pow_of(x, s.a_minus_1)) /* x^a */                          \
  X(Clamp, Input, x < s.a ? s.a : (x > s.b ? s.b : x), (x >= s.a && x <= s.b) ? g : T(0)) /* a..b */ \
  X(AddScalar, Nothing, x + s.a, g)                                                                  \
  X(MulScalar, Nothing, x * s.a, g * s.a)                                                            \
  X(RSubScalar, Nothing, s.a - x, -g)                                                                \
  X(RDivScalar, Input, s.a / x, -g * s.a / (x * x))

// X(Name, a op b): arithmetic, in the inputs' dtype. Maximum/Minimum propagate NaN: a NaN in a wins, and a NaN
// in b fails the comparison, so b is picked.
#define TD_BINARY_OPS(X)                    \
  X(Add, a + b)                             \
  X(Sub, a - b)                             \
  X(Mul, a * b)                             \
  X(Div, a / b)                             \
  X(Maximum, (a != a || a > b) ? a : b)     \
  X(Minimum, (a != a || a < b) ? a : b)

// X(Name, a op b): comparisons, writing u8 0 or 1.
#define TD_COMPARISONS(X) \
  X(Eq, a == b)           \
  X(Ne, a != b)           \
  X(Lt, a < b)            \
  X(Le, a <= b)           \
  X(Gt, a > b)            \
  X(Ge, a >= b)

// clang-format on

// A row's enum value, for expanding a table into a list: {TD_UNARY_OPS(TD_OP_NAME)}.
#define TD_OP_NAME(Name, ...) Name,
