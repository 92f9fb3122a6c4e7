// Device versions of the elementwise formulas of kernels/cpu/elementwise.cc (same cases, same NaN rules),
// applied to N values at once so that the op switch is taken once per vector, not once per element.
#pragma once

#include <cuda_runtime.h>

#include "runtime/backend.h"

namespace tandem {
namespace cuda {

// Math in the element's own precision (expf for floats, as std::exp(float) on the CPU).
__device__ __forceinline__ float exp_of(float x) { return expf(x); }
__device__ __forceinline__ double exp_of(double x) { return exp(x); }
__device__ __forceinline__ float log_of(float x) { return logf(x); }
__device__ __forceinline__ double log_of(double x) { return log(x); }
__device__ __forceinline__ float sqrt_of(float x) { return sqrtf(x); }
__device__ __forceinline__ double sqrt_of(double x) { return sqrt(x); }
__device__ __forceinline__ float tanh_of(float x) { return tanhf(x); }
__device__ __forceinline__ double tanh_of(double x) { return tanh(x); }
__device__ __forceinline__ float abs_of(float x) { return fabsf(x); }
__device__ __forceinline__ double abs_of(double x) { return fabs(x); }
__device__ __forceinline__ float pow_of(float x, float a) { return powf(x, a); }
__device__ __forceinline__ double pow_of(double x, double a) { return pow(x, a); }

template <typename T, int N, typename F>
__device__ __forceinline__ void map_values(T (&v)[N], F f) {
#pragma unroll
  for (int i = 0; i < N; ++i) v[i] = f(v[i]);
}

template <typename T, int N>
__device__ __forceinline__ void apply_unary(UnaryOp op, T (&v)[N], const UnaryParams& p) {
  const T a = static_cast<T>(p.a), b = static_cast<T>(p.b);
  switch (op) {
    case UnaryOp::Neg: map_values(v, [](T x) { return -x; }); break;
    case UnaryOp::Exp: map_values(v, [](T x) { return exp_of(x); }); break;
    case UnaryOp::Log: map_values(v, [](T x) { return log_of(x); }); break;
    case UnaryOp::Sqrt: map_values(v, [](T x) { return sqrt_of(x); }); break;
    case UnaryOp::Relu: map_values(v, [](T x) { return x < T(0) ? T(0) : x; }); break;
    case UnaryOp::Relu6: map_values(v, [](T x) { return x < T(0) ? T(0) : (x > T(6) ? T(6) : x); }); break;
    case UnaryOp::Sigmoid: map_values(v, [](T x) { return T(1) / (T(1) + exp_of(-x)); }); break;
    case UnaryOp::Tanh: map_values(v, [](T x) { return tanh_of(x); }); break;
    case UnaryOp::Abs: map_values(v, [](T x) { return abs_of(x); }); break;
    case UnaryOp::Pow: map_values(v, [a](T x) { return pow_of(x, a); }); break;
    case UnaryOp::Clamp: map_values(v, [a, b](T x) { return x < a ? a : (x > b ? b : x); }); break;
    case UnaryOp::AddScalar: map_values(v, [a](T x) { return x + a; }); break;
    case UnaryOp::MulScalar: map_values(v, [a](T x) { return x * a; }); break;
    case UnaryOp::RSubScalar: map_values(v, [a](T x) { return a - x; }); break;
    case UnaryOp::RDivScalar: map_values(v, [a](T x) { return a / x; }); break;
  }
}

// g[i] becomes d op / dx times g[i], from x or y as unary_backward_reads_output says.
template <typename T, int N>
__device__ __forceinline__ void apply_unary_grad(UnaryOp op, const T (&x)[N], const T (&y)[N], T (&g)[N],
                                                 const UnaryParams& p) {
  const T a = static_cast<T>(p.a), b = static_cast<T>(p.b);
  switch (op) {
    case UnaryOp::Neg:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = -g[i];
      break;
    case UnaryOp::Exp:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = g[i] * y[i];
      break;
    case UnaryOp::Log:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = g[i] / x[i];
      break;
    case UnaryOp::Sqrt:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = g[i] / (T(2) * y[i]);
      break;
    case UnaryOp::Relu:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = y[i] > T(0) ? g[i] : T(0);
      break;
    case UnaryOp::Relu6:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = (y[i] > T(0) && y[i] < T(6)) ? g[i] : T(0);
      break;
    case UnaryOp::Sigmoid:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = g[i] * y[i] * (T(1) - y[i]);
      break;
    case UnaryOp::Tanh:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = g[i] * (T(1) - y[i] * y[i]);
      break;
    case UnaryOp::Abs:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = x[i] > T(0) ? g[i] : (x[i] < T(0) ? -g[i] : T(0));
      break;
    case UnaryOp::Pow: {
      const T am1 = static_cast<T>(p.a - 1);
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = g[i] * a * pow_of(x[i], am1);
      break;
    }
    case UnaryOp::Clamp:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = (x[i] >= a && x[i] <= b) ? g[i] : T(0);
      break;
    case UnaryOp::AddScalar: break;
    case UnaryOp::MulScalar:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = g[i] * a;
      break;
    case UnaryOp::RSubScalar:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = -g[i];
      break;
    case UnaryOp::RDivScalar:
#pragma unroll
      for (int i = 0; i < N; ++i) g[i] = -g[i] * a / (x[i] * x[i]);
      break;
  }
}

// out[i] = a[i] op b[i] for the arithmetic ops. Maximum/Minimum propagate NaN like the CPU: a NaN in `a`
// wins, and a NaN in `b` fails the comparison, so b is picked.
template <typename T, int N>
__device__ __forceinline__ void apply_binary(BinaryOp op, const T (&a)[N], const T (&b)[N], T (&out)[N]) {
  switch (op) {
    case BinaryOp::Add:
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = a[i] + b[i];
      break;
    case BinaryOp::Sub:
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = a[i] - b[i];
      break;
    case BinaryOp::Mul:
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = a[i] * b[i];
      break;
    case BinaryOp::Div:
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = a[i] / b[i];
      break;
    case BinaryOp::Maximum:
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = (a[i] != a[i] || a[i] > b[i]) ? a[i] : b[i];
      break;
    case BinaryOp::Minimum:
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = (a[i] != a[i] || a[i] < b[i]) ? a[i] : b[i];
      break;
    default:
#pragma unroll
      for (int i = 0; i < N; ++i) out[i] = a[i];
      break;
  }
}

template <typename T>
__device__ __forceinline__ uint8_t apply_compare(BinaryOp op, T a, T b) {
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

}  // namespace cuda
}  // namespace tandem
