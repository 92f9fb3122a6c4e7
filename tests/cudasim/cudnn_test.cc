// The simulated cuDNN against convolutions written from their definition (every algorithm, both layouts and
// modes, groups, stride, padding, dilation, alpha and beta, f32 and f64), its documented support (no float64
// backward pass with an NHWC filter), its algorithm heuristics and search, TF32 and non-determinism, and the
// misuse cuDNN and a GPU refuse.
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <limits>
#include <string>
#include <thread>
#include <vector>

#include "tests/cudasim/sim_testing.h"

namespace {

using cudasim_testing::DeviceBuffer;

std::string last_error() {
  char text[512];
  cudnnGetLastErrorString(text, sizeof(text));
  return text;
}

struct Case {
  const char* name;
  int n, c, h, w, k, r, s, groups;
  int pad_h, pad_w, u, v, dil_h, dil_w;
  cudnnConvolutionMode_t mode;
  cudnnTensorFormat_t format;
  int p() const { return 1 + (h + 2 * pad_h - ((r - 1) * dil_h + 1)) / u; }
  int q() const { return 1 + (w + 2 * pad_w - ((s - 1) * dil_w + 1)) / v; }
};

const Case kCases[] = {
    {"nchw_3x3_pad1", 2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_TENSOR_NCHW},
    {"nhwc_stride2_dilation2_convolution", 2, 4, 9, 8, 3, 3, 3, 1, 2, 1, 2, 2, 2, 1, CUDNN_CONVOLUTION,
     CUDNN_TENSOR_NHWC},
    {"groups2_convolution", 1, 6, 5, 7, 4, 2, 3, 2, 0, 1, 1, 2, 1, 1, CUDNN_CONVOLUTION, CUDNN_TENSOR_NCHW},
    {"depthwise_nhwc_stride2", 2, 5, 6, 6, 5, 3, 3, 5, 1, 1, 2, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_TENSOR_NHWC},
    {"pointwise_nhwc", 3, 8, 4, 4, 8, 1, 1, 1, 0, 0, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_TENSOR_NHWC},
    {"nchw_5x5_pad2", 1, 2, 8, 8, 2, 5, 5, 1, 2, 2, 1, 1, 1, 1, CUDNN_CONVOLUTION, CUDNN_TENSOR_NCHW},
};

// Offset of element (n, c, h, w) of a packed tensor, or (k, c, r, s) of a filter, in the case's format.
size_t offset(cudnnTensorFormat_t f, int C, int H, int W, int n, int c, int h, int w) {
  return f == CUDNN_TENSOR_NCHW ? ((static_cast<size_t>(n) * C + c) * H + h) * W + w
                                : ((static_cast<size_t>(n) * H + h) * W + w) * C + c;
}

// Calls f(x offset, w offset, y offset) for every product in the convolution's definition:
// y[n][k][p][q] = sum over c, r, s of x[n][g C/G + c][p u - pad_h + r dil_h][q v - pad_w + s dil_w] w'[k][c][r][s],
// g = k / (K/G), with w' = w for cross-correlation and w rotated by 180 degrees for convolution.
void for_each_product(const Case& t, const std::function<void(size_t, size_t, size_t)>& f) {
  const int cg = t.c / t.groups, kg = t.k / t.groups, P = t.p(), Q = t.q();
  for (int n = 0; n < t.n; ++n)
    for (int k = 0; k < t.k; ++k)
      for (int p = 0; p < P; ++p)
        for (int q = 0; q < Q; ++q)
          for (int c = 0; c < cg; ++c)
            for (int r = 0; r < t.r; ++r)
              for (int s = 0; s < t.s; ++s) {
                const int h = p * t.u - t.pad_h + r * t.dil_h, w = q * t.v - t.pad_w + s * t.dil_w;
                if (h < 0 || h >= t.h || w < 0 || w >= t.w) continue;
                const int rr = t.mode == CUDNN_CONVOLUTION ? t.r - 1 - r : r;
                const int ss = t.mode == CUDNN_CONVOLUTION ? t.s - 1 - s : s;
                f(offset(t.format, t.c, t.h, t.w, n, (k / kg) * cg + c, h, w),
                  offset(t.format, cg, t.r, t.s, k, c, rr, ss), offset(t.format, t.k, P, Q, n, k, p, q));
              }
}

enum class Pass { Forward, BackwardData, BackwardFilter };
const char* pass_name(Pass p) {
  return p == Pass::Forward ? "forward" : p == Pass::BackwardData ? "backward data" : "backward filter";
}
int algo_count(Pass p) {
  if (p == Pass::Forward) return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  if (p == Pass::BackwardData) return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
}

// A pass's result from the definition, and the sum of the magnitudes of its terms (the scale of rounding
// errors), for inputs `a` and `b`: (x, w) forward, (w, dy) backward data, (x, dy) backward filter. `round`
// maps each input before it is multiplied.
struct Reference {
  std::vector<double> value, magnitude;
};
template <typename T>
Reference reference(const Case& t, Pass pass, const std::vector<T>& a, const std::vector<T>& b, size_t out_size,
                    const std::function<double(T)>& round) {
  Reference r{std::vector<double>(out_size, 0.0), std::vector<double>(out_size, 0.0)};
  for_each_product(t, [&](size_t xi, size_t wi, size_t yi) {
    double term;
    size_t out;
    if (pass == Pass::Forward) {
      term = round(a[xi]) * round(b[wi]), out = yi;
    } else if (pass == Pass::BackwardData) {
      term = round(a[wi]) * round(b[yi]), out = xi;
    } else {
      term = round(a[xi]) * round(b[yi]), out = wi;
    }
    r.value[out] += term;
    r.magnitude[out] += std::abs(term);
  });
  return r;
}

template <typename T>
double exact(T v) {
  return v;
}

template <typename T>
cudnnDataType_t data_type() {
  return sizeof(T) == 4 ? CUDNN_DATA_FLOAT : CUDNN_DATA_DOUBLE;
}

// The descriptors of a case.
struct Descriptors {
  cudnnTensorDescriptor_t x = nullptr, y = nullptr;
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
  Descriptors(const Case& t, cudnnDataType_t type, cudnnMathType_t math) {
    EXPECT_EQ(cudnnCreateTensorDescriptor(&x), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateTensorDescriptor(&y), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateFilterDescriptor(&w), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnCreateConvolutionDescriptor(&conv), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetTensor4dDescriptor(x, t.format, type, t.n, t.c, t.h, t.w), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetTensor4dDescriptor(y, t.format, type, t.n, t.k, t.p(), t.q()), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetFilter4dDescriptor(w, type, t.format, t.k, t.c / t.groups, t.r, t.s), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolution2dDescriptor(conv, t.pad_h, t.pad_w, t.u, t.v, t.dil_h, t.dil_w, t.mode, type),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolutionGroupCount(conv, t.groups), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnSetConvolutionMathType(conv, math), CUDNN_STATUS_SUCCESS);
  }
  ~Descriptors() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
};

// A cuDNN handle on cuda:`device` with its own stream.
using OnDevice = cudasim_testing::LibraryOnDevice<cudnnHandle_t, cudnnStatus_t, cudnnCreate, cudnnSetStream,
                                                  cudnnDestroy, CUDNN_STATUS_SUCCESS>;

size_t x_size(const Case& t) { return static_cast<size_t>(t.n) * t.c * t.h * t.w; }
size_t w_size(const Case& t) { return static_cast<size_t>(t.k) * (t.c / t.groups) * t.r * t.s; }
size_t y_size(const Case& t) { return static_cast<size_t>(t.n) * t.k * t.p() * t.q(); }

cudnnStatus_t workspace_size(const OnDevice& d, const Descriptors& ds, Pass pass, int algo, size_t* bytes) {
  if (pass == Pass::Forward)
    return cudnnGetConvolutionForwardWorkspaceSize(d.handle, ds.x, ds.w, ds.conv, ds.y,
                                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
  if (pass == Pass::BackwardData)
    return cudnnGetConvolutionBackwardDataWorkspaceSize(d.handle, ds.w, ds.y, ds.conv, ds.x,
                                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
  return cudnnGetConvolutionBackwardFilterWorkspaceSize(d.handle, ds.x, ds.y, ds.conv, ds.w,
                                                        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
}

// The most workspace any algorithm of `pass` that runs the case reports.
size_t largest_workspace(const OnDevice& d, const Descriptors& ds, Pass pass) {
  size_t most = 0;
  for (int a = 0; a < algo_count(pass); ++a) {
    size_t ws = 0;
    if (workspace_size(d, ds, pass, a, &ws) == CUDNN_STATUS_SUCCESS) most = std::max(most, ws);
  }
  return most;
}

// Queues one pass with inputs a and b (as in `reference`) into out.
cudnnStatus_t run_pass(const OnDevice& d, const Descriptors& ds, Pass pass, int algo, const void* alpha, const void* a,
                       const void* b, const void* beta, void* out, void* ws, size_t ws_bytes) {
  if (pass == Pass::Forward)
    return cudnnConvolutionForward(d.handle, alpha, ds.x, a, ds.w, b, ds.conv,
                                   static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, ws_bytes, beta, ds.y, out);
  if (pass == Pass::BackwardData)
    return cudnnConvolutionBackwardData(d.handle, alpha, ds.w, a, ds.y, b, ds.conv,
                                        static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, ws_bytes, beta, ds.x,
                                        out);
  return cudnnConvolutionBackwardFilter(d.handle, alpha, ds.x, a, ds.y, b, ds.conv,
                                        static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, ws_bytes, beta, ds.w,
                                        out);
}

// Queues the plain f32 forward convolution of the stream and fault tests: implicit GEMM, alpha 1, beta 0, no
// workspace.
cudnnStatus_t forward_f32(const OnDevice& d, const Descriptors& ds, const float* x, const float* w, void* y) {
  const float one = 1, zero = 0;
  return run_pass(d, ds, Pass::Forward, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, &one, x, w, &zero, y, nullptr, 0);
}

// The sizes of a pass's inputs and output.
void pass_sizes(const Case& t, Pass pass, size_t* a, size_t* b, size_t* out) {
  if (pass == Pass::Forward) *a = x_size(t), *b = w_size(t), *out = y_size(t);
  if (pass == Pass::BackwardData) *a = w_size(t), *b = y_size(t), *out = x_size(t);
  if (pass == Pass::BackwardFilter) *a = x_size(t), *b = y_size(t), *out = w_size(t);
}

// Runs `algo` of `pass` with exactly the workspace it reports and returns the output.
template <typename T>
std::vector<T> compute(const OnDevice& d, const Descriptors& ds, Pass pass, int algo, T alpha, const std::vector<T>& a,
                       const std::vector<T>& b, T beta, const std::vector<T>& prior) {
  size_t ws = 0;
  EXPECT_EQ(workspace_size(d, ds, pass, algo, &ws), CUDNN_STATUS_SUCCESS) << last_error();
  DeviceBuffer<T> da(a), db(b), dout(prior);
  DeviceBuffer<char> dws(ws);
  EXPECT_EQ(run_pass(d, ds, pass, algo, &alpha, da.get(), db.get(), &beta, dout.get(), dws.get(), ws),
            CUDNN_STATUS_SUCCESS)
      << last_error();
  EXPECT_EQ(cudaStreamSynchronize(d.stream), cudaSuccess);
  return dout.download();
}

// Every algorithm that runs each case, against the definition; once with alpha = 1, beta = 0 over NaN (the
// output must not be read), once with alpha = 0.5, beta = -1.5 over random values. Float data uses FMA math
// (exact products).
template <typename T>
void check_pass(Pass pass, double tol) {
  auto g = cudasim_testing::rng();
  OnDevice d;
  for (const Case& t : kCases) {
    Descriptors ds(t, data_type<T>(), sizeof(T) == 4 ? CUDNN_FMA_MATH : CUDNN_DEFAULT_MATH);
    size_t na, nb, nout;
    pass_sizes(t, pass, &na, &nb, &nout);
    const std::vector<T> a = cudasim_testing::uniform<T>(na, g), b = cudasim_testing::uniform<T>(nb, g);
    const Reference want = reference<T>(t, pass, a, b, nout, exact<T>);
    int ran = 0;
    for (int algo = 0; algo < algo_count(pass); ++algo) {
      size_t ws = 0;
      const cudnnStatus_t st = workspace_size(d, ds, pass, algo, &ws);
      if (st == CUDNN_STATUS_NOT_SUPPORTED) continue;
      ASSERT_EQ(st, CUDNN_STATUS_SUCCESS) << last_error();
      ++ran;
      for (int variant = 0; variant < 2; ++variant) {
        const T alpha = variant == 0 ? T(1) : T(0.5), beta = variant == 0 ? T(0) : T(-1.5);
        const std::vector<T> prior = variant == 0 ? std::vector<T>(nout, std::numeric_limits<T>::quiet_NaN())
                                                  : cudasim_testing::uniform<T>(nout, g);
        const std::vector<T> got = compute(d, ds, pass, algo, alpha, a, b, beta, prior);
        for (size_t i = 0; i < nout; ++i) {
          const double expected = alpha * want.value[i] + (variant == 0 ? 0.0 : beta * double(prior[i]));
          const double scale = std::abs(alpha) * want.magnitude[i] + (variant == 0 ? 0.0 : std::abs(beta * prior[i]));
          ASSERT_NEAR(got[i], expected, tol * scale + 1e-30)
              << t.name << " " << pass_name(pass) << " algorithm " << algo << " element " << i << " alpha " << alpha
              << " beta " << beta;
        }
      }
    }
    // cuDNN documents no double data configuration for NHWC filters in the backward passes.
    if (sizeof(T) == 8 && t.format == CUDNN_TENSOR_NHWC && pass != Pass::Forward)
      EXPECT_EQ(ran, 0) << t.name << ": float64 NHWC " << pass_name(pass) << " ran";
    else
      EXPECT_GE(ran, 2) << t.name << ": too few algorithms run " << pass_name(pass);
  }
}

TEST(CudasimCudnn, ForwardF32EveryAlgorithmMatchesDefinition) { check_pass<float>(Pass::Forward, 2e-6); }
TEST(CudasimCudnn, ForwardF64EveryAlgorithmMatchesDefinition) { check_pass<double>(Pass::Forward, 1e-13); }
TEST(CudasimCudnn, BackwardDataF32EveryAlgorithmMatchesDefinition) { check_pass<float>(Pass::BackwardData, 2e-6); }
TEST(CudasimCudnn, BackwardDataF64EveryAlgorithmMatchesDefinition) { check_pass<double>(Pass::BackwardData, 1e-13); }
TEST(CudasimCudnn, BackwardFilterF32EveryAlgorithmMatchesDefinition) { check_pass<float>(Pass::BackwardFilter, 2e-6); }
TEST(CudasimCudnn, BackwardFilterF64EveryAlgorithmMatchesDefinition) {
  check_pass<double>(Pass::BackwardFilter, 1e-13);
}

// alpha = beta = 1 (what Tandem's backward uses to add a data gradient into a pending one): the documented
// alpha * result + beta * prior with the result as stored in f32, so each element is the f32 sum of the beta = 0
// output and the prior, bitwise (a separate add's value), for every algorithm of the first case.
TEST(CudasimCudnn, BetaOneAddsTheStoredResultToThePriorInOneRounding) {
  auto g = cudasim_testing::rng();
  OnDevice d;
  const Case& t = kCases[0];
  Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
  size_t na, nb, nout;
  pass_sizes(t, Pass::BackwardData, &na, &nb, &nout);
  const std::vector<float> a = cudasim_testing::uniform<float>(na, g), b = cudasim_testing::uniform<float>(nb, g);
  const std::vector<float> prior = cudasim_testing::uniform<float>(nout, g);
  for (int algo = 0; algo < algo_count(Pass::BackwardData); ++algo) {
    size_t ws = 0;
    if (workspace_size(d, ds, Pass::BackwardData, algo, &ws) != CUDNN_STATUS_SUCCESS) continue;
    if (algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0) continue;  // non-deterministic: each run sums in its own order
    const std::vector<float> alone = compute<float>(d, ds, Pass::BackwardData, algo, 1, a, b, 0, prior);
    const std::vector<float> added = compute<float>(d, ds, Pass::BackwardData, algo, 1, a, b, 1, prior);
    for (size_t i = 0; i < nout; ++i)
      ASSERT_EQ(added[i], alone[i] + prior[i]) << t.name << " algorithm " << algo << " element " << i;
  }
}

TEST(CudasimCudnn, OutputDimFollowsTheDocumentedFormula) {
  auto g = cudasim_testing::rng();
  Descriptors ds(kCases[0], CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH);
  std::uniform_int_distribution<int> size(1, 20), small(1, 4), pad(0, 3);
  for (int i = 0; i < 200; ++i) {
    const int groups = small(g), h = size(g), w = size(g), r = small(g), s = small(g), ph = pad(g), pw = pad(g),
              u = small(g), v = small(g), dh = small(g), dw = small(g);
    ASSERT_EQ(cudnnSetTensor4dDescriptor(ds.x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 3, 2 * groups, h, w),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, 5 * groups, 2, r, s),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetConvolution2dDescriptor(ds.conv, ph, pw, u, v, dh, dw, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetConvolutionGroupCount(ds.conv, groups), CUDNN_STATUS_SUCCESS);
    int n = 0, c = 0, p = 0, q = 0;
    const cudnnStatus_t st = cudnnGetConvolution2dForwardOutputDim(ds.conv, ds.x, ds.w, &n, &c, &p, &q);
    const int span_h = h + 2 * ph - ((r - 1) * dh + 1), span_w = w + 2 * pw - ((s - 1) * dw + 1);
    if (span_h < 0 || span_w < 0) {
      EXPECT_EQ(st, CUDNN_STATUS_BAD_PARAM) << "filter larger than the padded input";
      continue;
    }
    ASSERT_EQ(st, CUDNN_STATUS_SUCCESS) << last_error();
    EXPECT_EQ(n, 3);
    EXPECT_EQ(c, 5 * groups);
    EXPECT_EQ(p, 1 + span_h / u);
    EXPECT_EQ(q, 1 + span_w / v);
  }
}

// Float inputs go through TF32 in algorithms with tensor-core kernels under CUDNN_TENSOR_OP_MATH and
// CUDNN_DEFAULT_MATH (compute capability >= 8.0), never under CUDNN_FMA_MATH nor in algorithms without them.
TEST(CudasimCudnn, Tf32ShowsAsAPrecisionDifference) {
  auto g = cudasim_testing::rng();
  const Case t{"tf32", 2, 16, 8, 8, 16, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_TENSOR_NCHW};
  OnDevice d;
  struct Run {
    Pass pass;
    int tensor_algo, plain_algo;
  };
  const Run runs[] = {
      {Pass::Forward, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM},
      {Pass::BackwardData, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0},
      {Pass::BackwardFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0},
  };
  for (const Run& run : runs) {
    size_t na, nb, nout;
    pass_sizes(t, run.pass, &na, &nb, &nout);
    const std::vector<float> a = cudasim_testing::uniform<float>(na, g), b = cudasim_testing::uniform<float>(nb, g);
    const Reference exact_products = reference<float>(t, run.pass, a, b, nout, exact<float>);
    const Reference tf32_products = reference<float>(t, run.pass, a, b, nout, cudasim_testing::tf32);
    const std::vector<float> zeros(nout, 0.f);
    // Largest error relative to the terms' magnitude, against either reference.
    auto worst = [&](const std::vector<float>& got, const Reference& ref) {
      double e = 0;
      for (size_t i = 0; i < nout; ++i)
        e = std::max(e, std::abs(got[i] - ref.value[i]) / std::max(ref.magnitude[i], 1e-30));
      return e;
    };
    const std::string what = pass_name(run.pass);
    for (cudnnMathType_t math : {CUDNN_TENSOR_OP_MATH, CUDNN_DEFAULT_MATH}) {
      Descriptors ds(t, CUDNN_DATA_FLOAT, math);
      const std::vector<float> tf = compute(d, ds, run.pass, run.tensor_algo, 1.f, a, b, 0.f, zeros);
      EXPECT_LT(worst(tf, tf32_products), 2e-6) << what << " math " << math;
      // Each term's inputs are off by at most 2^-11 relative each.
      EXPECT_LT(worst(tf, exact_products), std::ldexp(1.0, -10)) << what;
      EXPECT_GT(worst(tf, exact_products), 1e-5) << what << ": TF32 is not visible with math " << math;
      const std::vector<float> plain = compute(d, ds, run.pass, run.plain_algo, 1.f, a, b, 0.f, zeros);
      EXPECT_LT(worst(plain, exact_products), 1e-6) << what << ": an algorithm without tensor cores";
    }
    Descriptors fma(t, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
    const std::vector<float> exact_run = compute(d, fma, run.pass, run.tensor_algo, 1.f, a, b, 0.f, zeros);
    EXPECT_LT(worst(exact_run, exact_products), 1e-6) << what << ": CUDNN_FMA_MATH";
  }
}

// Algorithms documented as non-deterministic give bitwise different results from one call to the next on the
// same inputs; deterministic ones never do.
TEST(CudasimCudnn, NonDeterministicAlgorithmsVaryAndDeterministicOnesDoNot) {
  auto g = cudasim_testing::rng();
  const Case t{"determinism", 4, 8, 6, 6, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_TENSOR_NCHW};
  OnDevice d;
  struct Run {
    Pass pass;
    int algo;
    bool deterministic;
  };
  const Run runs[] = {
      {Pass::BackwardData, CUDNN_CONVOLUTION_BWD_DATA_ALGO_0, false},
      {Pass::BackwardData, CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, true},
      {Pass::BackwardFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0, false},
      {Pass::BackwardFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, false},
      {Pass::BackwardFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, true},
      {Pass::Forward, CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, true},
  };
  Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
  for (const Run& run : runs) {
    size_t na, nb, nout;
    pass_sizes(t, run.pass, &na, &nb, &nout);
    const std::vector<float> a = cudasim_testing::uniform<float>(na, g), b = cudasim_testing::uniform<float>(nb, g);
    const std::vector<float> zeros(nout, 0.f);
    const std::vector<float> first = compute(d, ds, run.pass, run.algo, 1.f, a, b, 0.f, zeros);
    bool differs = false;
    for (int i = 0; i < 4; ++i) {
      const std::vector<float> again = compute(d, ds, run.pass, run.algo, 1.f, a, b, 0.f, zeros);
      differs = differs || std::memcmp(first.data(), again.data(), nout * sizeof(float)) != 0;
    }
    EXPECT_EQ(differs, !run.deterministic) << pass_name(run.pass) << " algorithm " << run.algo;
  }
}

// The algorithm search: one result per algorithm and math type tried, the successful ones first and by time,
// the workspace limit honored, documented determinism, and the output buffer overwritten.
TEST(CudasimCudnn, FindReportsEveryAlgorithmSortedByTime) {
  auto g = cudasim_testing::rng();
  const Case t{"find", 2, 8, 10, 10, 8, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_TENSOR_NCHW};
  OnDevice d;
  Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH);
  const std::vector<float> x = cudasim_testing::uniform<float>(x_size(t), g),
                           w = cudasim_testing::uniform<float>(w_size(t), g);
  DeviceBuffer<float> dx(x), dw(w), dy(std::vector<float>(y_size(t), 0.f));
  const size_t most = largest_workspace(d, ds, Pass::Forward);
  DeviceBuffer<char> workspace(most);
  cudnnConvolutionFwdAlgoPerf_t perf[2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  int returned = 0;
  ASSERT_EQ(cudnnFindConvolutionForwardAlgorithmEx(d.handle, ds.x, dx.get(), ds.w, dw.get(), ds.conv, ds.y, dy.get(),
                                                   2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf,
                                                   workspace.get(), most),
            CUDNN_STATUS_SUCCESS)
      << last_error();
  // Algorithms with tensor-core kernels are tried with CUDNN_TENSOR_OP_MATH and CUDNN_DEFAULT_MATH, the others
  // with CUDNN_DEFAULT_MATH only.
  const bool tensor_ops[] = {false, true, false, false, false, false, false, true};
  int expected = 0;
  for (bool has : tensor_ops) expected += has ? 2 : 1;
  ASSERT_EQ(returned, expected);
  bool failures_started = false;
  float last_time = 0;
  for (int i = 0; i < returned; ++i) {
    const cudnnConvolutionFwdAlgoPerf_t& r = perf[i];
    size_t ws = 0;
    const cudnnStatus_t supported = workspace_size(d, ds, Pass::Forward, r.algo, &ws);
    EXPECT_EQ(r.determinism, CUDNN_DETERMINISTIC);
    EXPECT_TRUE(r.mathType == CUDNN_DEFAULT_MATH || (tensor_ops[r.algo] && r.mathType == CUDNN_TENSOR_OP_MATH));
    if (supported != CUDNN_STATUS_SUCCESS) {
      EXPECT_EQ(r.status, CUDNN_STATUS_NOT_SUPPORTED) << "algorithm " << r.algo;
      failures_started = true;
      continue;
    }
    EXPECT_EQ(r.status, CUDNN_STATUS_SUCCESS) << "algorithm " << r.algo;
    EXPECT_FALSE(failures_started) << "a successful result after a failed one";
    EXPECT_EQ(r.memory, ws) << "algorithm " << r.algo;
    EXPECT_GT(r.time, 0.f);
    EXPECT_GE(r.time, last_time) << "not sorted by time";
    last_time = r.time;
  }
  for (float v : dy.download()) ASSERT_TRUE(std::isnan(v)) << "Find leaves arbitrary values in y";
  EXPECT_EQ(dx.download(), x) << "Find wrote into its input";
  EXPECT_EQ(dw.download(), w) << "Find wrote into its input";
}

TEST(CudasimCudnn, FindHonorsTheWorkspaceLimitAndTimeGrowsWithWork) {
  auto g = cudasim_testing::rng();
  OnDevice d;
  float implicit_gemm_time[2] = {0, 0};
  for (int big = 0; big < 2; ++big) {
    const Case t{"limit",          big ? 8 : 2, 4, 8, 8, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION,
                 CUDNN_TENSOR_NCHW};
    Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH);
    DeviceBuffer<float> x(cudasim_testing::uniform<float>(x_size(t), g)),
        dy(cudasim_testing::uniform<float>(y_size(t), g)), dw(w_size(t));
    cudnnConvolutionBwdFilterAlgoPerf_t perf[2 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
    int returned = 0;
    ASSERT_EQ(cudnnFindConvolutionBackwardFilterAlgorithmEx(d.handle, ds.x, x.get(), ds.y, dy.get(), ds.conv, ds.w,
                                                            dw.get(), 2 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                            &returned, perf, nullptr, 0),
              CUDNN_STATUS_SUCCESS)
        << last_error();
    int succeeded = 0;
    for (int i = 0; i < returned; ++i) {
      const cudnnConvolutionBwdFilterAlgoPerf_t& r = perf[i];
      const bool documented_nondeterministic =
          r.algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 || r.algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3;
      EXPECT_EQ(r.determinism, documented_nondeterministic ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC);
      size_t ws = 0;
      if (workspace_size(d, ds, Pass::BackwardFilter, r.algo, &ws) != CUDNN_STATUS_SUCCESS) continue;
      // No workspace given: what needs some cannot run.
      EXPECT_EQ(r.status == CUDNN_STATUS_SUCCESS, ws == 0) << "algorithm " << r.algo;
      succeeded += r.status == CUDNN_STATUS_SUCCESS;
      if (r.algo == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0 && r.mathType == CUDNN_FMA_MATH)
        implicit_gemm_time[big] = r.time;
    }
    EXPECT_GE(succeeded, 1);
  }
  EXPECT_GT(implicit_gemm_time[0], 0.f);
  EXPECT_GT(implicit_gemm_time[1], implicit_gemm_time[0]) << "4 times the work takes no longer";
}

// The results of cudnnFindConvolutionBackwardDataAlgorithmEx for double data of case t, without a workspace
// (every algorithm, one math type each), and what it left in dx.
struct BackwardDataSearch {
  std::vector<cudnnConvolutionBwdDataAlgoPerf_t> results;
  std::vector<double> dx;
};
BackwardDataSearch find_backward_data_f64(const OnDevice& d, const Descriptors& ds, const Case& t) {
  DeviceBuffer<double> w(w_size(t)), dy(y_size(t)), dx(x_size(t));
  BackwardDataSearch out;
  out.results.resize(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT);
  int returned = 0;
  EXPECT_EQ(cudnnFindConvolutionBackwardDataAlgorithmEx(d.handle, ds.w, w.get(), ds.y, dy.get(), ds.conv, ds.x,
                                                        dx.get(), CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned,
                                                        out.results.data(), nullptr, 0),
            CUDNN_STATUS_SUCCESS)
      << last_error();
  out.results.resize(static_cast<size_t>(returned));
  out.dx = dx.download();
  return out;
}

TEST(CudasimCudnn, FindBackwardDataMarksAlgo0NonDeterministic) {
  const Case t = kCases[0];
  OnDevice d;
  Descriptors ds(t, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH);
  const BackwardDataSearch found = find_backward_data_f64(d, ds, t);
  ASSERT_EQ(found.results.size(), static_cast<size_t>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT));
  for (const cudnnConvolutionBwdDataAlgoPerf_t& r : found.results)
    EXPECT_EQ(r.determinism,
              r.algo == CUDNN_CONVOLUTION_BWD_DATA_ALGO_0 ? CUDNN_NON_DETERMINISTIC : CUDNN_DETERMINISTIC);
  for (double v : found.dx) ASSERT_TRUE(std::isnan(v));
  DeviceBuffer<double> w(w_size(t)), dy(y_size(t)), dx(x_size(t));
  cudnnConvolutionBwdDataAlgoPerf_t perf[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  int none = 0;
  EXPECT_EQ(cudnnFindConvolutionBackwardDataAlgorithmEx(d.handle, ds.w, w.get(), ds.y, dy.get(), ds.conv, ds.x,
                                                        dx.get(), 0, &none, perf, nullptr, 0),
            CUDNN_STATUS_BAD_PARAM)
      << "requestedAlgoCount 0";
}

extern "C" unsigned long long tandem_cudasim_cudnn_algorithm_queries(int timed);

// The heuristics (cudnnGetConvolution*Algorithm_v7) answer without data or GPU work: every algorithm and math
// type Find tries, those that run first and in the order of expected speed (here the order Find measures), each
// with its workspace and no time, the rest with their status; Find is not called.
TEST(CudasimCudnn, HeuristicsRankEveryAlgorithmWithoutRunningAnything) {
  const Case t{"heuristics", 2, 8, 10, 10, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_TENSOR_NCHW};
  OnDevice d;
  Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_TENSOR_OP_MATH);
  const unsigned long long finds = tandem_cudasim_cudnn_algorithm_queries(1),
                           asked = tandem_cudasim_cudnn_algorithm_queries(0);
  cudnnConvolutionBwdFilterAlgoPerf_t guess[2 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int returned = 0;
  ASSERT_EQ(cudnnGetConvolutionBackwardFilterAlgorithm_v7(
                d.handle, ds.x, ds.y, ds.conv, ds.w, 2 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &returned, guess),
            CUDNN_STATUS_SUCCESS)
      << last_error();
  EXPECT_EQ(tandem_cudasim_cudnn_algorithm_queries(0), asked + 1);
  EXPECT_EQ(tandem_cudasim_cudnn_algorithm_queries(1), finds) << "the heuristics ran a search";
  // Tensor-op and default math for the algorithms with tensor-core kernels (ALGO_1, WINOGRAD_NONFUSED), default
  // math for the other five.
  ASSERT_EQ(returned, 2 * 2 + 5);

  DeviceBuffer<float> x(x_size(t)), dy(y_size(t)), dw(w_size(t));
  const size_t most = largest_workspace(d, ds, Pass::BackwardFilter);
  DeviceBuffer<char> workspace(most);
  cudnnConvolutionBwdFilterAlgoPerf_t timed[2 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
  int found = 0;
  ASSERT_EQ(cudnnFindConvolutionBackwardFilterAlgorithmEx(d.handle, ds.x, x.get(), ds.y, dy.get(), ds.conv, ds.w,
                                                          dw.get(), 2 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT, &found,
                                                          timed, workspace.get(), most),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(tandem_cudasim_cudnn_algorithm_queries(1), finds + 1);
  ASSERT_EQ(found, returned);
  bool failures_started = false;
  for (int i = 0; i < returned; ++i) {
    const cudnnConvolutionBwdFilterAlgoPerf_t& r = guess[i];
    size_t ws = 0;
    ASSERT_EQ(cudnnSetConvolutionMathType(ds.conv, r.mathType), CUDNN_STATUS_SUCCESS);
    const cudnnStatus_t runs = workspace_size(d, ds, Pass::BackwardFilter, r.algo, &ws);
    EXPECT_EQ(r.status, runs) << "algorithm " << r.algo;
    if (r.status != CUDNN_STATUS_SUCCESS) {
      failures_started = true;
      continue;
    }
    EXPECT_FALSE(failures_started) << "a result that runs after one that does not";
    EXPECT_EQ(r.memory, ws) << "algorithm " << r.algo;
    EXPECT_EQ(r.time, -1.f) << "nothing was timed";
    EXPECT_EQ(r.algo, timed[i].algo) << "rank " << i;
    EXPECT_EQ(r.mathType, timed[i].mathType) << "rank " << i;
  }

  int none = 0;
  EXPECT_EQ(cudnnGetConvolutionBackwardFilterAlgorithm_v7(d.handle, ds.x, ds.y, ds.conv, ds.w, 0, &none, guess),
            CUDNN_STATUS_BAD_PARAM)
      << "requestedAlgoCount 0";
  EXPECT_EQ(cudnnGetConvolutionBackwardFilterAlgorithm_v7(d.handle, ds.x, ds.y, ds.conv, ds.w, 4, nullptr, guess),
            CUDNN_STATUS_BAD_PARAM);
  // The forward and backward data heuristics take their descriptors in their own API's order.
  cudnnConvolutionFwdAlgoPerf_t fwd[2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
  ASSERT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(d.handle, ds.x, ds.w, ds.conv, ds.y,
                                                   2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, fwd),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(fwd[0].status, CUDNN_STATUS_SUCCESS);
  cudnnConvolutionBwdDataAlgoPerf_t bwd[2 * CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
  ASSERT_EQ(cudnnGetConvolutionBackwardDataAlgorithm_v7(d.handle, ds.w, ds.y, ds.conv, ds.x,
                                                        2 * CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, bwd),
            CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(bwd[0].status, CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnGetConvolutionBackwardDataAlgorithm_v7(d.handle, ds.w, ds.x, ds.conv, ds.y,
                                                        2 * CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned, bwd),
            CUDNN_STATUS_BAD_PARAM)
      << "dy and dx swapped";
  EXPECT_EQ(cudnnGetVersion(), static_cast<size_t>(CUDNN_VERSION));
}

// cuDNN's support tables list NHWC (KRSC) filters for backward data and backward filter with half and float data
// only, and cuDNN 9.19 on an H200 offered no backward data algorithm for float64 channels-last tensors: no
// algorithm, heuristic or found, runs those; forward does, and so do float data in NHWC and double data in NCHW.
// It is the filter's format that counts (with one channel the NHWC and NCHW strides are the same).
TEST(CudasimCudnn, DoubleDataWithAnNhwcFilterHasNoBackwardAlgorithm) {
  OnDevice d;
  for (int c : {3, 1}) {
    for (cudnnTensorFormat_t format : {CUDNN_TENSOR_NHWC, CUDNN_TENSOR_NCHW}) {
      for (cudnnDataType_t type : {CUDNN_DATA_DOUBLE, CUDNN_DATA_FLOAT}) {
        const Case t{"nhwc", 2, c, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, format};
        Descriptors ds(t, type, CUDNN_DEFAULT_MATH);
        for (Pass pass : {Pass::Forward, Pass::BackwardData, Pass::BackwardFilter}) {
          const bool none = type == CUDNN_DATA_DOUBLE && format == CUDNN_TENSOR_NHWC && pass != Pass::Forward;
          const std::string what = std::string(pass_name(pass)) + (type == CUDNN_DATA_DOUBLE ? " double " : " float ") +
                                   (format == CUDNN_TENSOR_NHWC ? "NHWC" : "NCHW") + " c=" + std::to_string(c);
          int runs = 0;
          for (int a = 0; a < algo_count(pass); ++a) {
            size_t ws = 0;
            const cudnnStatus_t st = workspace_size(d, ds, pass, a, &ws);
            runs += st == CUDNN_STATUS_SUCCESS;
            if (none) {
              EXPECT_EQ(st, CUDNN_STATUS_NOT_SUPPORTED) << what << " algorithm " << a;
              EXPECT_NE(last_error().find("half and float"), std::string::npos) << last_error();
            }
          }
          int ranked = 0, ok = 0;
          if (pass == Pass::BackwardData) {
            cudnnConvolutionBwdDataAlgoPerf_t r[2 * CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT];
            ASSERT_EQ(cudnnGetConvolutionBackwardDataAlgorithm_v7(d.handle, ds.w, ds.y, ds.conv, ds.x, 12, &ranked, r),
                      CUDNN_STATUS_SUCCESS);
            for (int i = 0; i < ranked; ++i) ok += r[i].status == CUDNN_STATUS_SUCCESS;
          } else if (pass == Pass::BackwardFilter) {
            cudnnConvolutionBwdFilterAlgoPerf_t r[2 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT];
            ASSERT_EQ(
                cudnnGetConvolutionBackwardFilterAlgorithm_v7(d.handle, ds.x, ds.y, ds.conv, ds.w, 14, &ranked, r),
                CUDNN_STATUS_SUCCESS);
            for (int i = 0; i < ranked; ++i) ok += r[i].status == CUDNN_STATUS_SUCCESS;
          } else {
            cudnnConvolutionFwdAlgoPerf_t r[2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT];
            ASSERT_EQ(cudnnGetConvolutionForwardAlgorithm_v7(d.handle, ds.x, ds.w, ds.conv, ds.y, 16, &ranked, r),
                      CUDNN_STATUS_SUCCESS);
            for (int i = 0; i < ranked; ++i) ok += r[i].status == CUDNN_STATUS_SUCCESS;
          }
          EXPECT_GT(ranked, 0) << what;
          if (none) {
            EXPECT_EQ(runs, 0) << what;
            EXPECT_EQ(ok, 0) << what << ": the heuristics offer an algorithm";
          } else {
            EXPECT_GE(runs, 1) << what;
            EXPECT_GE(ok, 1) << what;
          }
        }
      }
    }
  }
  // Find, too, reports every backward data algorithm unsupported.
  const Case t{"nhwc", 2, 3, 7, 6, 4, 3, 3, 1, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_TENSOR_NHWC};
  Descriptors ds(t, CUDNN_DATA_DOUBLE, CUDNN_DEFAULT_MATH);
  const BackwardDataSearch found = find_backward_data_f64(d, ds, t);
  ASSERT_EQ(found.results.size(), static_cast<size_t>(CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT));
  for (const cudnnConvolutionBwdDataAlgoPerf_t& r : found.results)
    EXPECT_EQ(r.status, CUDNN_STATUS_NOT_SUPPORTED) << r.algo;
}

// The workspace an algorithm reports is the least it runs with.
TEST(CudasimCudnn, WorkspaceSmallerThanReportedIsRefused) {
  const Case t = kCases[0];
  OnDevice d;
  Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH);
  size_t ws = 0;
  ASSERT_EQ(workspace_size(d, ds, Pass::Forward, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, &ws), CUDNN_STATUS_SUCCESS);
  ASSERT_GT(ws, 0u);
  DeviceBuffer<float> x(x_size(t)), w(w_size(t)), y(y_size(t));
  DeviceBuffer<char> workspace(ws);
  const float one = 1, zero = 0;
  EXPECT_EQ(run_pass(d, ds, Pass::Forward, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, &one, x.get(), w.get(), &zero, y.get(),
                     workspace.get(), ws - 1),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_NE(last_error().find("workSpaceSizeInBytes"), std::string::npos) << last_error();
  EXPECT_EQ(run_pass(d, ds, Pass::Forward, CUDNN_CONVOLUTION_FWD_ALGO_GEMM, &one, x.get(), w.get(), &zero, y.get(),
                     nullptr, ws),
            CUDNN_STATUS_BAD_PARAM)
      << "NULL workspace";
  size_t filter_ws = 0;
  ASSERT_EQ(workspace_size(d, ds, Pass::BackwardFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, &filter_ws),
            CUDNN_STATUS_SUCCESS);
  ASSERT_GT(filter_ws, 0u);
  EXPECT_EQ(run_pass(d, ds, Pass::BackwardFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3, &one, x.get(), y.get(), &zero,
                     w.get(), workspace.get(), filter_ws - 1),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudaStreamSynchronize(d.stream), cudaSuccess);
}

TEST(CudasimCudnn, RefusesInvalidDescriptors) {
  cudnnTensorDescriptor_t t;
  cudnnFilterDescriptor_t f;
  cudnnConvolutionDescriptor_t c;
  ASSERT_EQ(cudnnCreateTensorDescriptor(&t), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnCreateFilterDescriptor(&f), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnCreateConvolutionDescriptor(&c), CUDNN_STATUS_SUCCESS);
  const auto nchw = CUDNN_TENSOR_NCHW;
  const auto fl = CUDNN_DATA_FLOAT;
  EXPECT_EQ(cudnnSetTensor4dDescriptor(t, nchw, fl, 0, 1, 1, 1), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(t, nchw, fl, 1, -2, 1, 1), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(t, static_cast<cudnnTensorFormat_t>(7), fl, 1, 1, 1, 1), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetTensor4dDescriptor(t, nchw, static_cast<cudnnDataType_t>(99), 1, 1, 1, 1), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetFilter4dDescriptor(f, fl, nchw, 0, 1, 3, 3), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetFilter4dDescriptor(f, fl, nchw, 1, 1, -3, 3), CUDNN_STATUS_BAD_PARAM);
  const auto xc = CUDNN_CROSS_CORRELATION;
  EXPECT_EQ(cudnnSetConvolution2dDescriptor(c, -1, 0, 1, 1, 1, 1, xc, fl), CUDNN_STATUS_BAD_PARAM) << "padding";
  EXPECT_EQ(cudnnSetConvolution2dDescriptor(c, 0, 0, 0, 1, 1, 1, xc, fl), CUDNN_STATUS_BAD_PARAM) << "stride";
  EXPECT_EQ(cudnnSetConvolution2dDescriptor(c, 0, 0, 1, 1, 1, 0, xc, fl), CUDNN_STATUS_BAD_PARAM) << "dilation";
  EXPECT_EQ(cudnnSetConvolution2dDescriptor(c, 0, 0, 1, 1, 1, 1, static_cast<cudnnConvolutionMode_t>(5), fl),
            CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolutionGroupCount(c, 0), CUDNN_STATUS_BAD_PARAM);
  EXPECT_EQ(cudnnSetConvolutionMathType(c, static_cast<cudnnMathType_t>(9)), CUDNN_STATUS_BAD_PARAM);
  EXPECT_FALSE(last_error().empty());
  int n, ch, h, w;
  EXPECT_EQ(cudnnGetConvolution2dForwardOutputDim(c, t, f, &n, &ch, &h, &w), CUDNN_STATUS_BAD_PARAM) << "never set";
  // Channels: 6 input channels, a filter of 4 per group and 2 groups.
  ASSERT_EQ(cudnnSetTensor4dDescriptor(t, nchw, fl, 1, 6, 8, 8), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetFilter4dDescriptor(f, fl, nchw, 4, 4, 3, 3), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetConvolution2dDescriptor(c, 0, 0, 1, 1, 1, 1, xc, fl), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudnnSetConvolutionGroupCount(c, 2), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnGetConvolution2dForwardOutputDim(c, t, f, &n, &ch, &h, &w), CUDNN_STATUS_BAD_PARAM);
  ASSERT_EQ(cudnnSetFilter4dDescriptor(f, fl, nchw, 3, 3, 3, 3), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnGetConvolution2dForwardOutputDim(c, t, f, &n, &ch, &h, &w), CUDNN_STATUS_BAD_PARAM)
      << "3 output channels in 2 groups";
  ASSERT_EQ(cudnnSetFilter4dDescriptor(f, fl, nchw, 4, 3, 9, 3), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnGetConvolution2dForwardOutputDim(c, t, f, &n, &ch, &h, &w), CUDNN_STATUS_BAD_PARAM)
      << "a filter taller than the input";
  ASSERT_EQ(cudnnSetFilter4dDescriptor(f, fl, nchw, 4, 3, 3, 3), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnGetConvolution2dForwardOutputDim(c, t, f, &n, &ch, &h, &w), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(n * 1000 + ch * 100 + h * 10 + w, 1466);
  EXPECT_EQ(cudnnDestroyTensorDescriptor(t), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnDestroyFilterDescriptor(f), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudnnDestroyConvolutionDescriptor(c), CUDNN_STATUS_SUCCESS);
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_BAD_PARAM), "CUDNN_STATUS_BAD_PARAM");
  EXPECT_STREQ(cudnnGetErrorString(CUDNN_STATUS_NOT_SUPPORTED), "CUDNN_STATUS_NOT_SUPPORTED");
}

// Convolutions whose descriptors disagree, or that an algorithm does not run, return the documented status.
TEST(CudasimCudnn, RefusesMismatchedConvolutions) {
  const Case t = kCases[0];
  OnDevice d;
  DeviceBuffer<float> x(x_size(t)), w(w_size(t)), y(y_size(t));
  const float one = 1, zero = 0;
  auto forward = [&](const Descriptors& ds, int algo, const void* alpha = nullptr) {
    return run_pass(d, ds, Pass::Forward, algo, alpha ? alpha : &one, x.get(), w.get(), &zero, y.get(), nullptr, 0);
  };
  const int implicit = CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM;
  {
    Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH);
    EXPECT_EQ(forward(ds, implicit), CUDNN_STATUS_SUCCESS);
    size_t ws;
    EXPECT_EQ(forward(ds, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT), CUDNN_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(workspace_size(d, ds, Pass::Forward, CUDNN_CONVOLUTION_FWD_ALGO_DIRECT, &ws), CUDNN_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(workspace_size(d, ds, Pass::BackwardFilter, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD, &ws),
              CUDNN_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(forward(ds, 42), CUDNN_STATUS_BAD_PARAM) << "no such algorithm";
    float nan_alpha = 1;
    EXPECT_EQ(run_pass(d, ds, Pass::Forward, implicit, &nan_alpha, x.get(), w.get(), nullptr, y.get(), nullptr, 0),
              CUDNN_STATUS_BAD_PARAM)
        << "NULL beta";
    EXPECT_EQ(run_pass(d, ds, Pass::Forward, implicit, &one, nullptr, w.get(), &zero, y.get(), nullptr, 0),
              CUDNN_STATUS_BAD_PARAM)
        << "NULL x";
    // The 5x5 Winograd and FFT algorithms need unit strides: the 3x3 case runs neither 5x5 Winograd...
    Case strided = t;
    strided.u = 2;
    Descriptors sd(strided, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH);
    EXPECT_EQ(workspace_size(d, sd, Pass::Forward, CUDNN_CONVOLUTION_FWD_ALGO_FFT, &ws), CUDNN_STATUS_NOT_SUPPORTED);
    EXPECT_EQ(workspace_size(d, sd, Pass::Forward, CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD, &ws),
              CUDNN_STATUS_NOT_SUPPORTED);
  }
  {
    Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH);
    ASSERT_EQ(cudnnSetFilter4dDescriptor(ds.w, CUDNN_DATA_DOUBLE, t.format, t.k, t.c, t.r, t.s), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(ds, implicit), CUDNN_STATUS_BAD_PARAM) << "float x and y, double w";
  }
  {
    Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH);
    ASSERT_EQ(cudnnSetConvolution2dDescriptor(ds.conv, 1, 1, 1, 1, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_DOUBLE),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(ds, implicit), CUDNN_STATUS_NOT_SUPPORTED) << "float data, double compute";
  }
  {
    Descriptors ds(t, CUDNN_DATA_HALF, CUDNN_DEFAULT_MATH);
    EXPECT_EQ(forward(ds, implicit), CUDNN_STATUS_NOT_SUPPORTED) << "half data is not simulated";
  }
  {
    Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH);
    ASSERT_EQ(cudnnSetTensor4dDescriptor(ds.y, t.format, CUDNN_DATA_FLOAT, t.n, t.k, t.p() + 1, t.q()),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(ds, implicit), CUDNN_STATUS_NOT_SUPPORTED) << "y of another spatial size";
    ASSERT_EQ(cudnnSetTensor4dDescriptor(ds.y, t.format, CUDNN_DATA_FLOAT, t.n, t.k + 1, t.p(), t.q()),
              CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(ds, implicit), CUDNN_STATUS_BAD_PARAM) << "y with other channels than the filter";
  }
  {
    Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH);
    ASSERT_EQ(cudnnSetConvolutionGroupCount(ds.conv, 2), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(forward(ds, implicit), CUDNN_STATUS_BAD_PARAM) << "3 channels, 2 groups";
  }
  EXPECT_EQ(cudaStreamSynchronize(d.stream), cudaSuccess);
}

TEST(CudasimCudnn, AddTensorBroadcastsABias) {
  auto g = cudasim_testing::rng();
  OnDevice d;
  for (cudnnTensorFormat_t format : {CUDNN_TENSOR_NCHW, CUDNN_TENSOR_NHWC}) {
    const int N = 2, C = 3, H = 4, W = 5;
    cudnnTensorDescriptor_t a, c;
    ASSERT_EQ(cudnnCreateTensorDescriptor(&a), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnCreateTensorDescriptor(&c), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetTensor4dDescriptor(a, format, CUDNN_DATA_DOUBLE, 1, C, 1, 1), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetTensor4dDescriptor(c, format, CUDNN_DATA_DOUBLE, N, C, H, W), CUDNN_STATUS_SUCCESS);
    const std::vector<double> bias = cudasim_testing::uniform<double>(C, g),
                              prior = cudasim_testing::uniform<double>(N * C * H * W, g);
    DeviceBuffer<double> da(bias), dc(prior);
    const double alpha = 2, beta = 0.5;
    ASSERT_EQ(cudnnAddTensor(d.handle, &alpha, a, da.get(), &beta, c, dc.get()), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamSynchronize(d.stream), cudaSuccess);
    const std::vector<double> got = dc.download();
    for (int n = 0; n < N; ++n)
      for (int ch = 0; ch < C; ++ch)
        for (int h = 0; h < H; ++h)
          for (int w = 0; w < W; ++w) {
            const size_t i = offset(format, C, H, W, n, ch, h, w);
            ASSERT_NEAR(got[i], alpha * bias[ch] + beta * prior[i], 1e-15) << "format " << format;
          }
    // A of C's own size adds element by element; beta = 0 ignores NaN in C.
    DeviceBuffer<double> full(prior), out(std::vector<double>(prior.size(), std::numeric_limits<double>::quiet_NaN()));
    const double zero = 0;
    ASSERT_EQ(cudnnAddTensor(d.handle, &alpha, c, full.get(), &zero, c, out.get()), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudaStreamSynchronize(d.stream), cudaSuccess);
    const std::vector<double> doubled = out.download();
    for (size_t i = 0; i < prior.size(); ++i) ASSERT_EQ(doubled[i], 2 * prior[i]);
    ASSERT_EQ(cudnnSetTensor4dDescriptor(a, format, CUDNN_DATA_DOUBLE, 1, C + 1, 1, 1), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnAddTensor(d.handle, &alpha, a, da.get(), &beta, c, dc.get()), CUDNN_STATUS_BAD_PARAM);
    ASSERT_EQ(cudnnSetTensor4dDescriptor(a, format, CUDNN_DATA_FLOAT, 1, C, 1, 1), CUDNN_STATUS_SUCCESS);
    EXPECT_EQ(cudnnAddTensor(d.handle, &alpha, a, da.get(), &beta, c, dc.get()), CUDNN_STATUS_BAD_PARAM)
        << "float A, double C";
    cudnnDestroyTensorDescriptor(a);
    cudnnDestroyTensorDescriptor(c);
  }
}

// The setting of the stream-order tests: the first case in f32 on cuda:0, random x and w on the device.
struct F32Forward {
  std::mt19937_64 g = cudasim_testing::rng();
  const Case t = kCases[0];
  OnDevice d;
  Descriptors ds{t, CUDNN_DATA_FLOAT, CUDNN_FMA_MATH};
  DeviceBuffer<float> x{cudasim_testing::uniform<float>(x_size(t), g)};
  DeviceBuffer<float> w{cudasim_testing::uniform<float>(w_size(t), g)};
  size_t y_bytes() const { return y_size(t) * sizeof(float); }
  cudnnStatus_t queue(void* y) const { return forward_f32(d, ds, x.get(), w.get(), y); }
};

// The call returns at once and the work runs on the handle's stream after what was queued before it: here a
// host function that holds the stream until the test lets it go. The output is pinned host memory, which the
// device may write, so that the host can look at it while the stream is held.
TEST(CudasimCudnn, WorkIsQueuedOnTheHandlesStream) {
  F32Forward f;
  float* y = nullptr;
  ASSERT_EQ(cudaMallocHost(reinterpret_cast<void**>(&y), f.y_bytes()), cudaSuccess);
  for (size_t i = 0; i < y_size(f.t); ++i) y[i] = 12345.f;
  cudasim_testing::StreamGate gate(f.d.stream);
  ASSERT_EQ(f.queue(y), CUDNN_STATUS_SUCCESS);
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  EXPECT_EQ(y[0], 12345.f) << "the convolution ran before the work queued ahead of it";
  gate.open();
  ASSERT_EQ(cudaStreamSynchronize(f.d.stream), cudaSuccess);
  EXPECT_NE(y[0], 12345.f);
  cudaFreeHost(y);
}

// A buffer freed after the call and allocated again (smaller) on the same stream before the work has run is
// still the buffer the work was given: stream order puts the work first.
TEST(CudasimCudnn, BufferReusedInStreamOrderAfterTheCallIsFine) {
  F32Forward f;
  void* y = nullptr;
  ASSERT_EQ(cudaMallocAsync(&y, f.y_bytes(), f.d.stream), cudaSuccess);
  cudasim_testing::StreamGate gate(f.d.stream);
  ASSERT_EQ(f.queue(y), CUDNN_STATUS_SUCCESS);
  ASSERT_EQ(cudaFreeAsync(y, f.d.stream), cudaSuccess);
  void* again = nullptr;
  ASSERT_EQ(cudaMallocAsync(&again, f.y_bytes() * 3 / 4, f.d.stream), cudaSuccess);
  gate.open();
  EXPECT_EQ(cudaStreamSynchronize(f.d.stream), cudaSuccess);
  EXPECT_EQ(cudaFreeAsync(again, f.d.stream), cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(f.d.stream), cudaSuccess);
}

// cuda:2 is never faulted in this test program; its streams are only handed to a cuda:0 handle.
TEST(CudasimCudnn, StreamOfAnotherDeviceIsRefused) {
  cudaStream_t other;
  ASSERT_NO_FATAL_FAILURE(cudasim_testing::create_stream_on(2, &other));
  OnDevice d(0);
  EXPECT_EQ(cudnnSetStream(d.handle, other), CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH);
  EXPECT_NE(last_error().find("cuda:2"), std::string::npos) << last_error();
  EXPECT_EQ(cudnnSetStream(d.handle, nullptr), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamDestroy(other), cudaSuccess);
  EXPECT_EQ(cudnnSetStream(d.handle, other), CUDNN_STATUS_BAD_PARAM) << "a destroyed stream";
}

TEST(CudasimCudnn, HandleHoldsDeviceMemoryUntilDestroyed) {
  cudasim_testing::expect_handles_hold_device_memory(cudnnCreate, cudnnDestroy, CUDNN_STATUS_SUCCESS,
                                                     CUDNN_STATUS_ALLOC_FAILED);
}

// A GPU faults on memory its kernels may not touch, and the device's error is sticky. cuda:1 and cuda:3 are
// faulted here and used by no other test.
TEST(CudasimCudnn, MemoryOfAnotherDeviceFaults) {
  const Case t = kCases[0];
  ASSERT_EQ(cudaSetDevice(0), cudaSuccess);
  DeviceBuffer<float> x0(x_size(t));
  OnDevice d(1);
  Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH);
  DeviceBuffer<float> w(w_size(t)), y(y_size(t));
  // The fault shows when the work runs.
  ASSERT_EQ(forward_f32(d, ds, x0.get(), w.get(), y.get()), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamSynchronize(d.stream), cudaErrorIllegalAddress);
  EXPECT_EQ(cudaDeviceSynchronize(), cudaErrorIllegalAddress) << "the error is sticky";
}

TEST(CudasimCudnn, OutputSmallerThanItsDescriptorFaults) {
  const Case t = kCases[0];
  OnDevice d(3);
  Descriptors ds(t, CUDNN_DATA_FLOAT, CUDNN_DEFAULT_MATH);
  DeviceBuffer<float> x(x_size(t)), w(w_size(t)), y(y_size(t) - 1);
  ASSERT_EQ(forward_f32(d, ds, x.get(), w.get(), y.get()), CUDNN_STATUS_SUCCESS);
  EXPECT_EQ(cudaStreamSynchronize(d.stream), cudaErrorIllegalAddress);
}

}  // namespace
