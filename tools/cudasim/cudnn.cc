// The simulated cuDNN (the legacy convolution API Tandem calls): handles bound to a device and a stream,
// tensor, filter and convolution descriptors, per-algorithm workspace sizes, the algorithm heuristics and search
// and the convolutions, queued on the handle's stream and computed by cudnn_conv.cc. Which algorithm runs which
// problem follows cuDNN's documented support tables and what a real GPU showed. Arguments a GPU build of cuDNN
// refuses are refused here with its status and a reason (cudnnGetLastErrorString); memory of another device
// or out of bounds makes the work fault when it runs, like a kernel.
#include <cudnn.h>

#include <algorithm>
#include <atomic>
#include <climits>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "tools/cudasim/cublas_shared.h"
#include "tools/cudasim/cudnn_conv.h"
#include "tools/cudasim/sim.h"
#include "tools/cudasim/state.h"

struct cudnnContext {
  int device = 0;
  cudaStream_t stream = nullptr;  // as given to cudnnSetStream (nullptr: the device's legacy default stream)
};

struct cudnnTensorStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;
  cudasim::cudnn::Dims dims;
};

struct cudnnFilterStruct {
  bool set = false;
  cudnnDataType_t type = CUDNN_DATA_FLOAT;
  cudnnTensorFormat_t format = CUDNN_TENSOR_NCHW;  // which of cuDNN's support tables applies (KCRS or KRSC)
  cudasim::cudnn::Dims dims;                       // (k, c, r, s)
};

struct cudnnConvolutionStruct {
  bool set = false;
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  cudnnConvolutionMode_t mode = CUDNN_CROSS_CORRELATION;
  cudnnDataType_t compute = CUDNN_DATA_FLOAT;
  int groups = 1;                             // cudnnSetConvolutionGroupCount's default
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;  // cudnnSetConvolutionMathType's default
};

namespace {

using cudasim::cudnn::Conv;
using cudasim::cudnn::Dims;

// Device memory a handle holds for cuDNN's own use.
constexpr size_t kHandleBytes = size_t{4} << 20;

// The reason for the calling thread's last failed call (cudnnGetLastErrorString).
thread_local std::string tl_last_error;

cudnnStatus_t fail(cudnnStatus_t status, const std::string& why) {
  tl_last_error = why;
  return status;
}

// Handles and descriptors are created and destroyed through cudasim::Live, which refuses dead ones.
template <typename T>
cudnnStatus_t create(T** out, const char* api) {
  cudasim::count_call(api);
  if (out == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, std::string(api) + ": the output pointer is NULL");
  T* t = new T();
  cudasim::Live<T>::of().add(t);
  *out = t;
  return CUDNN_STATUS_SUCCESS;
}
template <typename T>
bool alive(const T* t) {
  return cudasim::Live<T>::of().contains(t);
}
template <typename T>
cudnnStatus_t destroy(T* t, const char* api) {
  if (t == nullptr) return CUDNN_STATUS_SUCCESS;  // destroying NULL is a no-op
  if (!cudasim::Live<T>::of().remove(t))
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(api) + ": not a live descriptor (destroyed twice?)");
  delete t;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t check_handle(const cudnnContext* h, const char* api) {
  if (!alive(h)) return fail(CUDNN_STATUS_BAD_PARAM, std::string(api) + ": not a live cuDNN handle");
  return CUDNN_STATUS_SUCCESS;
}

bool valid_type(cudnnDataType_t t) { return t >= CUDNN_DATA_FLOAT && t <= CUDNN_DATA_COMPLEX_FP64; }

// A 4-d tensor or filter descriptor: sizes n (k for a filter), c, h, w with NCHW (KCRS) or NHWC (KRSC) strides.
template <typename Desc>
cudnnStatus_t set_4d(Desc* desc, const std::string& api, const char* kind, cudnnTensorFormat_t format,
                     cudnnDataType_t type, int n, int c, int h, int w) {
  if (!alive(desc)) return fail(CUDNN_STATUS_BAD_PARAM, api + ": not a live " + kind + " descriptor");
  if (!valid_type(type)) return fail(CUDNN_STATUS_BAD_PARAM, api + ": invalid data type " + std::to_string(type));
  if (format != CUDNN_TENSOR_NCHW && format != CUDNN_TENSOR_NHWC) {
    if (format == CUDNN_TENSOR_NCHW_VECT_C)
      return fail(CUDNN_STATUS_NOT_SUPPORTED, api + ": CUDNN_TENSOR_NCHW_VECT_C is not simulated");
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": invalid format " + std::to_string(format));
  }
  if (n <= 0 || c <= 0 || h <= 0 || w <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": sizes must be positive, got " + std::to_string(n) + " x " +
                                            std::to_string(c) + " x " + std::to_string(h) + " x " + std::to_string(w));
  if (int64_t{n} * c * h * w > INT_MAX) return fail(CUDNN_STATUS_NOT_SUPPORTED, api + ": more than 2^31 - 1 elements");
  Dims d;
  d.n = n, d.c = c, d.h = h, d.w = w;
  if (format == CUDNN_TENSOR_NCHW) {
    d.sw = 1, d.sh = w, d.sc = int64_t{h} * w, d.sn = int64_t{c} * h * w;
  } else {
    d.sc = 1, d.sw = c, d.sh = int64_t{w} * c, d.sn = int64_t{h} * w * c;
  }
  desc->dims = d;
  desc->type = type;
  desc->format = format;
  desc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

// The stream the handle's work goes to: the one cudnnSetStream gave, else its device's legacy default
// stream (whatever device is current on the calling thread). Null, with the reason, when it cannot be used.
std::shared_ptr<CUstream_st> handle_stream(const cudnnContext& h, cudnnStatus_t* status, const char* api) {
  cudaError_t err;
  std::shared_ptr<CUstream_st> ref = cudasim::library_stream(h.device, h.stream, &err);
  if (ref == nullptr) {
    const bool lost = cudasim::sticky_error(h.device) != cudaSuccess;
    *status = fail(lost ? CUDNN_STATUS_EXECUTION_FAILED : CUDNN_STATUS_BAD_PARAM,
                   std::string(api) + ": the handle's stream cannot take work: " + cudaGetErrorString(err));
  }
  return ref;
}

// ---- convolution problems ----

enum class Pass { Forward, BackwardData, BackwardFilter };

// What the API of a pass calls the input, filter and output of the forward convolution.
struct Roles {
  const char* x;
  const char* w;
  const char* y;
};
const Roles kForward{"xDesc", "wDesc", "yDesc"};
const Roles kBackwardData{"dxDesc", "wDesc", "dyDesc"};
const Roles kBackwardFilter{"xDesc", "dwDesc", "dyDesc"};

struct Problem {
  Conv conv;
  size_t element = 4;
  cudnnMathType_t math = CUDNN_DEFAULT_MATH;
  bool w_innermost = true;   // x and y have unit stride along w (NCHW), which the FFT algorithms need
  bool nhwc_filter = false;  // the filter descriptor's format is CUDNN_TENSOR_NHWC (KRSC)
};

std::string dims_text(const Dims& d) {
  return "[" + std::to_string(d.n) + ", " + std::to_string(d.c) + ", " + std::to_string(d.h) + ", " +
         std::to_string(d.w) + "]";
}

// Output size of one spatial dimension (cudnnGetConvolution2dForwardOutputDim's formula), or <= 0 when the
// dilated filter does not fit in the padded input.
int64_t output_size(int64_t in, int pad, int filter, int dil, int stride) {
  const int64_t span = in + 2 * int64_t{pad} - (int64_t{filter - 1} * dil + 1);
  return span < 0 ? 0 : 1 + span / stride;
}

// Checks the descriptors of one convolution as cuDNN does and resolves them into a Problem.
cudnnStatus_t make_problem(const std::string& api, const Roles& r, const cudnnTensorStruct* x,
                           const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y,
                           Problem* out) {
  if (!alive(x) || !x->set) return fail(CUDNN_STATUS_BAD_PARAM, api + ": " + r.x + " is not a set tensor descriptor");
  if (!alive(y) || !y->set) return fail(CUDNN_STATUS_BAD_PARAM, api + ": " + r.y + " is not a set tensor descriptor");
  if (!alive(w) || !w->set) return fail(CUDNN_STATUS_BAD_PARAM, api + ": " + r.w + " is not a set filter descriptor");
  if (!alive(conv) || !conv->set)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": convDesc is not a set convolution descriptor");
  if (x->type != w->type || x->type != y->type)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": the data types of " + r.x + ", " + r.w + " and " + r.y + " differ (" +
                                            std::to_string(x->type) + ", " + std::to_string(w->type) + ", " +
                                            std::to_string(y->type) + ")");
  if (x->type != CUDNN_DATA_FLOAT && x->type != CUDNN_DATA_DOUBLE)
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                api + ": data type " + std::to_string(x->type) + " is not simulated (float and double are)");
  if (conv->compute != x->type)
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                api + ": compute type " + std::to_string(conv->compute) + " with data type " + std::to_string(x->type) +
                    " is none of the supported configurations (FLOAT_CONFIG: float data and compute; "
                    "DOUBLE_CONFIG: double data and compute)");
  const Dims& xd = x->dims;
  const Dims& wd = w->dims;
  const Dims& yd = y->dims;
  const int g = conv->groups;
  if (xd.c != wd.c * g)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": " + r.x + " has " + std::to_string(xd.c) + " channels but " + r.w +
                                            " " + dims_text(wd) + " with group count " + std::to_string(g) + " takes " +
                                            std::to_string(int64_t{wd.c} * g));
  if (wd.n % g != 0)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": " + r.w + " has " + std::to_string(wd.n) +
                                            " output channels, not a multiple of the group count " + std::to_string(g));
  const int64_t p = output_size(xd.h, conv->pad_h, wd.h, conv->dil_h, conv->stride_h);
  const int64_t q = output_size(xd.w, conv->pad_w, wd.w, conv->dil_w, conv->stride_w);
  if (p <= 0 || q <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": the dilated filter " + dims_text(wd) + " is larger than the padded " +
                                            r.x + " " + dims_text(xd));
  if (yd.n != xd.n || yd.c != wd.n)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": " + r.y + " " + dims_text(yd) + " does not match " + r.x + " " +
                                            dims_text(xd) + " and " + r.w + " " + dims_text(wd));
  if (yd.h != p || yd.w != q)
    return fail(CUDNN_STATUS_NOT_SUPPORTED, api + ": " + r.y + " " + dims_text(yd) +
                                                " has not the spatial size the convolution gives (" +
                                                std::to_string(p) + "x" + std::to_string(q) + ")");
  Problem& pr = *out;
  pr.conv.x = xd;
  pr.conv.w = wd;
  pr.conv.y = yd;
  pr.conv.groups = g;
  pr.conv.pad_h = conv->pad_h;
  pr.conv.pad_w = conv->pad_w;
  pr.conv.stride_h = conv->stride_h;
  pr.conv.stride_w = conv->stride_w;
  pr.conv.dil_h = conv->dil_h;
  pr.conv.dil_w = conv->dil_w;
  pr.conv.flip = conv->mode == CUDNN_CONVOLUTION;
  pr.conv.f64 = x->type == CUDNN_DATA_DOUBLE;
  pr.element = pr.conv.f64 ? 8 : 4;
  pr.math = conv->math;
  pr.w_innermost = xd.sw == 1 && yd.sw == 1;
  pr.nhwc_filter = w->format == CUDNN_TENSOR_NHWC;
  return CUDNN_STATUS_SUCCESS;
}

// ---- algorithms: which shapes each runs, its workspace, determinism, speed ----

struct Algo {
  const char* name;
  bool deterministic;
  bool tensor_ops;    // has TF32 tensor-core kernels
  double efficiency;  // fraction of the device's arithmetic rate it reaches
};

// Non-deterministic as cuDNN documents: backward data ALGO_0, backward filter ALGO_0 and ALGO_3.
const Algo kForwardAlgos[CUDNN_CONVOLUTION_FWD_ALGO_COUNT] = {
    {"CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM", true, false, 0.45},
    {"CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM", true, true, 0.7},
    {"CUDNN_CONVOLUTION_FWD_ALGO_GEMM", true, false, 0.55},
    {"CUDNN_CONVOLUTION_FWD_ALGO_DIRECT", true, false, 0.3},
    {"CUDNN_CONVOLUTION_FWD_ALGO_FFT", true, false, 0.35},
    {"CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING", true, false, 0.35},
    {"CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD", true, false, 0.5},
    {"CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED", true, true, 0.5},
};
const Algo kBackwardDataAlgos[CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT] = {
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_0", false, false, 0.75},
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_1", true, true, 0.6},
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT", true, false, 0.35},
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING", true, false, 0.35},
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD", true, false, 0.5},
    {"CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED", true, true, 0.5},
};
const Algo kBackwardFilterAlgos[CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT] = {
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_0", false, false, 0.7},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1", true, true, 0.55},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT", true, false, 0.3},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3", false, false, 0.8},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD", true, false, 0.5},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED", true, true, 0.5},
    {"CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING", true, false, 0.3},
};

int algo_count(Pass pass) {
  if (pass == Pass::Forward) return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
  if (pass == Pass::BackwardData) return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
  return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
}
const Algo& algo_info(Pass pass, int a) {
  return pass == Pass::Forward        ? kForwardAlgos[a]
         : pass == Pass::BackwardData ? kBackwardDataAlgos[a]
                                      : kBackwardFilterAlgos[a];
}

// The method an algorithm number stands for, the same across passes where cuDNN has one.
enum class Method { ImplicitGemm, PrecompGemm, Gemm, Fft, FftTiling, Winograd, WinogradNonfused, Atomic, Never };
Method method(Pass pass, int a) {
  if (pass == Pass::Forward) {
    const Method m[] = {Method::ImplicitGemm, Method::PrecompGemm, Method::Gemm,     Method::Never,
                        Method::Fft,          Method::FftTiling,   Method::Winograd, Method::WinogradNonfused};
    return m[a];
  }
  if (pass == Pass::BackwardData) {
    const Method m[] = {Method::Atomic,    Method::ImplicitGemm, Method::Fft,
                        Method::FftTiling, Method::Winograd,     Method::WinogradNonfused};
    return m[a];
  }
  // Backward filter: ALGO_3 sums split partials with atomics too, into a workspace; WINOGRAD is documented as
  // not implemented.
  const Method m[] = {Method::Atomic, Method::ImplicitGemm,     Method::Fft,      Method::Atomic,
                      Method::Never,  Method::WinogradNonfused, Method::FftTiling};
  return m[a];
}

int64_t next_pow2(int64_t v) {
  int64_t p = 1;
  while (p < v) p *= 2;
  return p;
}

// Whether algorithm `a` of `pass` runs problem p: "" and its workspace and arithmetic (in flops), or the
// reason it does not (its status is then CUDNN_STATUS_NOT_SUPPORTED, the same in every call).
struct Support {
  std::string why_not;
  size_t workspace = 0;
  double flops = 0;
};
Support support(Pass pass, int a, const Problem& p) {
  const Conv& c = p.conv;
  const int64_t N = c.x.n, C = c.x.c, H = c.x.h, W = c.x.w, K = c.w.n, Cg = c.w.c, R = c.w.h, S = c.w.w, P = c.y.h,
                Q = c.y.w;
  const double direct = 2.0 * N * K * Cg * R * S * P * Q;
  const bool plain = c.stride_h == 1 && c.stride_w == 1 && c.dil_h == 1 && c.dil_w == 1 && c.groups == 1;
  const int64_t e = static_cast<int64_t>(p.element);
  Support s;
  const Method m = method(pass, a);
  // cuDNN's tables of supported configurations list NHWC (KRSC) filters for backward data and backward filter
  // with the half and float data configurations only: no algorithm takes double data there (cuDNN 9.19 on an
  // H200 offered none for backward data). Forward does take double data in NHWC (it ran on that GPU).
  if (c.f64 && p.nhwc_filter && pass != Pass::Forward) {
    s.why_not = "with an NHWC filter it takes half and float data only (no DOUBLE_CONFIG)";
    return s;
  }
  if (m == Method::Never) {
    s.why_not = "this algorithm is not implemented";
    return s;
  }
  if (m == Method::Fft || m == Method::FftTiling || m == Method::Winograd || m == Method::WinogradNonfused) {
    if (c.f64) {
      s.why_not = "it takes float data only";
    } else if (!plain) {
      s.why_not = "it needs unit stride and dilation and a group count of 1";
    } else if ((m == Method::Fft || m == Method::FftTiling) && !p.w_innermost) {
      s.why_not = "it needs the NCHW layout";
    } else if ((m == Method::Fft || m == Method::FftTiling) && (c.pad_h >= R || c.pad_w >= S)) {
      s.why_not = "it needs padding smaller than the filter";
    } else if (m == Method::Fft && (H + 2 * c.pad_h > 256 || W + 2 * c.pad_w > 256)) {
      s.why_not = "it needs a padded input of at most 256x256";
    } else if (m == Method::FftTiling && (R > 32 || S > 32)) {
      s.why_not = "it needs a filter of at most 32x32";
    } else if (m == Method::Winograd && !(R == 3 && S == 3)) {
      s.why_not = "it needs a 3x3 filter";
    } else if (m == Method::WinogradNonfused && !((R == 3 && S == 3) || (R == 5 && S == 5))) {
      s.why_not = "it needs a 3x3 or 5x5 filter";
    }
    if (!s.why_not.empty()) return s;
  }
  const int64_t tiles = N * ((P + 3) / 4) * ((Q + 3) / 4);
  switch (m) {
    case Method::ImplicitGemm: s.flops = direct; break;
    case Method::PrecompGemm:  // a table of input offsets per filter tap
      s.workspace = static_cast<size_t>(Cg * R * S * 8);
      s.flops = direct;
      break;
    case Method::Gemm:  // the unfolded input of one image
      s.workspace = static_cast<size_t>(C * R * S * P * Q * e);
      s.flops = direct;
      break;
    case Method::Fft: {  // every input, filter and output plane transformed at the padded size
      const int64_t hf = next_pow2(H + 2 * c.pad_h), wf = next_pow2(W + 2 * c.pad_w);
      const int64_t planes = N * C + K * C + N * K;
      s.workspace = static_cast<size_t>(planes * hf * (wf / 2 + 1) * 8);
      s.flops = 5.0 * planes * hf * wf * std::log2(static_cast<double>(hf * wf)) + 8.0 * N * K * C * hf * (wf / 2 + 1);
      break;
    }
    case Method::FftTiling: {  // the same on 32x32 tiles
      const int64_t t = ((H + 2 * c.pad_h + 31) / 32) * ((W + 2 * c.pad_w + 31) / 32);
      const int64_t planes = N * C * t + K * C + N * K * t;
      s.workspace = static_cast<size_t>(planes * 32 * 17 * 8);
      s.flops = 5.0 * planes * 1024 * 10 + 8.0 * N * K * C * t * 32 * 17;
      break;
    }
    case Method::Winograd:  // F(2x2, 3x3), fused: no workspace
      s.flops = direct / 2.25;
      break;
    case Method::WinogradNonfused:  // transformed 6x6 tiles of input, filter and output
      s.workspace = static_cast<size_t>((tiles * C + C * K + tiles * K) * 36 * e);
      s.flops = R == 3 ? direct / 4 : direct / 2.78;
      break;
    case Method::Atomic:  // backward filter ALGO_3 keeps its split partial sums in the workspace
      if (pass == Pass::BackwardFilter && a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_3)
        s.workspace = static_cast<size_t>(4 * K * Cg * R * S * e);
      s.flops = direct;
      break;
    case Method::Never: break;
  }
  return s;
}

// Float inputs are read as TF32 when the algorithm has tensor-core kernels and the math type permits them:
// CUDNN_TENSOR_OP_MATH(_ALLOW_CONVERSION), and CUDNN_DEFAULT_MATH, which permits TF32 on devices of compute
// capability 8.0 and newer (the simulated device is 9.0). CUDNN_FMA_MATH never does.
bool uses_tf32(Pass pass, int a, const Problem& p, cudnnMathType_t math) {
  return !p.conv.f64 && algo_info(pass, a).tensor_ops && math != CUDNN_FMA_MATH && cudasim::tf32_permitted();
}

// Simulated run time of an algorithm in milliseconds: grows with its arithmetic and the bytes it moves;
// tensor cores are fast only when the channels per group suit their tiles.
float run_time_ms(Pass pass, int a, const Problem& p, const Support& s, cudnnMathType_t math) {
  const Conv& c = p.conv;
  double rate = c.f64 ? 25e12 : 50e12;
  if (uses_tf32(pass, a, p, math)) {
    const bool aligned = c.w.c % 4 == 0 && (c.w.n / c.groups) % 4 == 0;
    rate = aligned ? 200e12 : 45e12;
  }
  const double bytes = (cudasim::cudnn::extent_bytes(c.x, p.element) + cudasim::cudnn::extent_bytes(c.w, p.element) +
                        cudasim::cudnn::extent_bytes(c.y, p.element) + 2.0 * s.workspace);
  const double seconds = 5e-6 + s.flops / (rate * algo_info(pass, a).efficiency) + bytes / 2e12;
  return static_cast<float>(seconds * 1e3);
}

// ---- running a pass ----

// The buffers of a pass as the API names them, in its argument order: the two it reads, then the one it
// writes (and reads unless beta is 0).
std::vector<cudasim::Access> operands(Pass pass, const Problem& p, const std::string& api, const void* in0,
                                      const void* in1, const void* out) {
  const Conv& c = p.conv;
  auto access = [&](const void* ptr, const Dims& d, const char* name) {
    return cudasim::Access{ptr, cudasim::cudnn::extent_bytes(d, p.element), api + " " + name + " " + dims_text(d)};
  };
  if (pass == Pass::Forward) return {access(in0, c.x, "x"), access(in1, c.w, "w"), access(out, c.y, "y")};
  if (pass == Pass::BackwardData) return {access(in0, c.w, "w"), access(in1, c.y, "dy"), access(out, c.x, "dx")};
  return {access(in0, c.x, "x"), access(in1, c.y, "dy"), access(out, c.w, "dw")};
}

double scalar(const void* p, bool f64) {
  return f64 ? *static_cast<const double*>(p) : static_cast<double>(*static_cast<const float*>(p));
}

cudnnStatus_t check_algo(Pass pass, int a, const char* api) {
  if (a < 0 || a >= algo_count(pass))
    return fail(CUDNN_STATUS_BAD_PARAM, std::string(api) + ": algorithm " + std::to_string(a) + " is not one of the " +
                                            std::to_string(algo_count(pass)) + " of this pass");
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t workspace_size(const std::string& api, Pass pass, cudnnHandle_t handle, const Roles& r,
                             const cudnnTensorStruct* x, const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv,
                             const cudnnTensorStruct* y, int algo, size_t* bytes) {
  if (cudnnStatus_t st = check_handle(handle, api.c_str())) return st;
  if (bytes == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, api + ": sizeInBytes is NULL");
  Problem p;
  if (cudnnStatus_t st = make_problem(api, r, x, w, conv, y, &p)) return st;
  if (cudnnStatus_t st = check_algo(pass, algo, api.c_str())) return st;
  const Support s = support(pass, algo, p);
  if (!s.why_not.empty())
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                api + ": " + algo_info(pass, algo).name + " does not run this problem: " + s.why_not);
  *bytes = s.workspace;
  return CUDNN_STATUS_SUCCESS;
}

// Queues one pass: `in0` and `in1` are read, `out` is written (and read unless beta is 0).
cudnnStatus_t run(const std::string& api, Pass pass, cudnnHandle_t handle, const Roles& r, const void* alpha,
                  const void* beta, const cudnnTensorStruct* x, const cudnnFilterStruct* w,
                  const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y, int algo, void* workspace,
                  size_t workspace_bytes, const void* in0, const void* in1, void* out) {
  if (cudnnStatus_t st = check_handle(handle, api.c_str())) return st;
  if (alpha == nullptr || beta == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, api + ": alpha or beta is NULL");
  if (in0 == nullptr || in1 == nullptr || out == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": a data pointer is NULL");
  Problem p;
  if (cudnnStatus_t st = make_problem(api, r, x, w, conv, y, &p)) return st;
  if (cudnnStatus_t st = check_algo(pass, algo, api.c_str())) return st;
  const Support s = support(pass, algo, p);
  if (!s.why_not.empty())
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                api + ": " + algo_info(pass, algo).name + " does not run this problem: " + s.why_not);
  if (workspace_bytes < s.workspace)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": workSpaceSizeInBytes " + std::to_string(workspace_bytes) +
                                            " is less than the " + std::to_string(s.workspace) + " bytes " +
                                            algo_info(pass, algo).name + " needs for this problem");
  if (s.workspace > 0 && workspace == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": workSpace is NULL but " + algo_info(pass, algo).name + " needs " +
                                            std::to_string(s.workspace) + " bytes");
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  std::shared_ptr<CUstream_st> stream = handle_stream(*handle, &st, api.c_str());
  if (stream == nullptr) return st;

  const Conv& c = p.conv;
  const double a = scalar(alpha, c.f64), b = scalar(beta, c.f64);
  cudasim::cudnn::Numerics m;
  m.tf32 = uses_tf32(pass, algo, p, p.math);
  m.unordered = !algo_info(pass, algo).deterministic;
  std::vector<cudasim::Access> accesses = operands(pass, p, api, in0, in1, out);
  const size_t scratch = s.workspace;
  accesses.push_back({workspace, scratch, api + " workSpace"});
  cudasim::enqueue_checked(stream.get(), handle->device, api, accesses, [=] {
    if (scratch > 0) std::memset(workspace, 0xff, scratch);  // the algorithm's scratch: what was there is gone
    if (pass == Pass::Forward)
      cudasim::cudnn::forward(c, m, a, in0, in1, b, out);
    else if (pass == Pass::BackwardData)
      cudasim::cudnn::backward_data(c, m, a, in0, in1, b, out);
    else
      cudasim::cudnn::backward_filter(c, m, a, in0, in1, b, out);
  });
  return CUDNN_STATUS_SUCCESS;
}

// The answers of an algorithm query: every algorithm with the descriptor's math type and with
// CUDNN_DEFAULT_MATH (only the latter for algorithms without tensor-core kernels when tensor ops are asked), those
// that run problem p first, by the time model above, then the others with their status:
// CUDNN_STATUS_NOT_SUPPORTED, or CUDNN_STATUS_ALLOC_FAILED where the algorithm needs more than
// `workspace_bytes`. With `timed` (Find) a result carries its time; without (the heuristics), -1.
template <typename Perf, typename AlgoEnum>
std::vector<Perf> ranked(Pass pass, const Problem& p, size_t workspace_bytes, bool timed) {
  std::vector<Perf> ok, failed;
  const bool wants_tensor_ops = p.math == CUDNN_TENSOR_OP_MATH || p.math == CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION;
  for (int a = 0; a < algo_count(pass); ++a) {
    std::vector<cudnnMathType_t> maths;
    if (!(wants_tensor_ops && !algo_info(pass, a).tensor_ops)) maths.push_back(p.math);
    if (p.math != CUDNN_DEFAULT_MATH) maths.push_back(CUDNN_DEFAULT_MATH);
    const Support s = support(pass, a, p);
    for (cudnnMathType_t math : maths) {
      Perf perf;
      std::memset(&perf, 0, sizeof(perf));
      perf.algo = static_cast<AlgoEnum>(a);
      perf.determinism = algo_info(pass, a).deterministic ? CUDNN_DETERMINISTIC : CUDNN_NON_DETERMINISTIC;
      perf.mathType = math;
      perf.time = -1;
      if (!s.why_not.empty()) {
        perf.status = CUDNN_STATUS_NOT_SUPPORTED;
      } else if (s.workspace > workspace_bytes) {
        perf.status = CUDNN_STATUS_ALLOC_FAILED;  // the workspace given is too small for it
        perf.memory = s.workspace;
      } else {
        perf.status = CUDNN_STATUS_SUCCESS;
        perf.memory = s.workspace;
        perf.time = run_time_ms(pass, a, p, s, math);
      }
      (perf.status == CUDNN_STATUS_SUCCESS ? ok : failed).push_back(perf);
    }
  }
  std::stable_sort(ok.begin(), ok.end(), [](const Perf& a, const Perf& b) { return a.time < b.time; });
  if (!timed)
    for (Perf& perf : ok) perf.time = -1;
  ok.insert(ok.end(), failed.begin(), failed.end());
  return ok;
}

// Calls of the algorithm queries so far, for tests: tandem_cudasim_cudnn_algorithm_queries.
std::atomic<unsigned long long> g_finds{0}, g_heuristics{0};

// Copies the first `requested` of `all` into `results`.
template <typename Perf>
void answer(const std::vector<Perf>& all, int requested, int* returned, Perf* results) {
  const int n = std::min(requested, static_cast<int>(all.size()));
  std::copy(all.begin(), all.begin() + n, results);
  *returned = n;
}

// cudnnGetConvolution*Algorithm_v7: cuDNN's heuristics, documented to return every algorithm (with the
// tensor-op and default math versions where tensor-op math may be available) sorted by expected relative
// performance, fastest first. Nothing runs on the GPU and no data is needed.
template <typename Perf, typename AlgoEnum>
cudnnStatus_t heuristics(Pass pass, const char* api, cudnnHandle_t handle, const Roles& r, const cudnnTensorStruct* x,
                         const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y,
                         int requested, int* returned, Perf* results) {
  const std::string name = api;
  if (cudnnStatus_t st = check_handle(handle, api)) return st;
  if (returned == nullptr || results == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, name + ": returnedAlgoCount or perfResults is NULL");
  if (requested < 1) return fail(CUDNN_STATUS_BAD_PARAM, name + ": requestedAlgoCount is less than 1");
  Problem p;
  if (cudnnStatus_t st = make_problem(name, r, x, w, conv, y, &p)) return st;
  ++g_heuristics;
  answer(ranked<Perf, AlgoEnum>(pass, p, SIZE_MAX, false), requested, returned, results);
  return CUDNN_STATUS_SUCCESS;
}

// cudnnFind*AlgorithmEx: the same results, each timed (by the model) within the workspace given. Like cuDNN, it
// runs on the handle's stream and blocks the host, and leaves arbitrary values (NaN) in the output buffer.
template <typename Perf, typename AlgoEnum>
cudnnStatus_t find(Pass pass, const char* api, cudnnHandle_t handle, const Roles& r, const cudnnTensorStruct* x,
                   const cudnnFilterStruct* w, const cudnnConvolutionStruct* conv, const cudnnTensorStruct* y,
                   const void* in0, const void* in1, void* out, int requested, int* returned, Perf* results,
                   void* workspace, size_t workspace_bytes) {
  const std::string name = api;
  if (cudnnStatus_t st = check_handle(handle, api)) return st;
  if (returned == nullptr || results == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, name + ": returnedAlgoCount or perfResults is NULL");
  if (requested < 1) return fail(CUDNN_STATUS_BAD_PARAM, name + ": requestedAlgoCount is less than 1");
  if (in0 == nullptr || in1 == nullptr || out == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, name + ": a data pointer is NULL");
  if (workspace == nullptr && workspace_bytes > 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                name + ": workSpace is NULL with workSpaceSizeInBytes " + std::to_string(workspace_bytes));
  Problem p;
  if (cudnnStatus_t st = make_problem(name, r, x, w, conv, y, &p)) return st;
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  std::shared_ptr<CUstream_st> stream = handle_stream(*handle, &st, api);
  if (stream == nullptr) return st;
  ++g_finds;
  answer(ranked<Perf, AlgoEnum>(pass, p, workspace_bytes, true), requested, returned, results);

  std::vector<cudasim::Access> accesses = operands(pass, p, name, in0, in1, out);
  const size_t out_bytes = accesses[2].bytes;
  accesses.push_back({workspace, workspace_bytes, name + " workSpace"});
  const int device = handle->device;
  cudasim::enqueue_checked(stream.get(), device, name, accesses,
                           [out, out_bytes] { std::memset(out, 0xff, out_bytes); });
  if (cudasim::synchronize(stream.get()) != cudaSuccess)
    return fail(CUDNN_STATUS_EXECUTION_FAILED,
                name + ": the device failed: " + cudaGetErrorString(cudasim::sticky_error(device)));
  return CUDNN_STATUS_SUCCESS;
}

struct StatusName {
  cudnnStatus_t status;
  const char* name;
};
#define CUDASIM_STATUS(s) \
  { s, #s }
const StatusName kStatusNames[] = {
    CUDASIM_STATUS(CUDNN_STATUS_SUCCESS),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_INITIALIZED),
    CUDASIM_STATUS(CUDNN_STATUS_SUBLIBRARY_VERSION_MISMATCH),
    CUDASIM_STATUS(CUDNN_STATUS_SERIALIZATION_VERSION_MISMATCH),
    CUDASIM_STATUS(CUDNN_STATUS_DEPRECATED),
    CUDASIM_STATUS(CUDNN_STATUS_LICENSE_ERROR),
    CUDASIM_STATUS(CUDNN_STATUS_RUNTIME_IN_PROGRESS),
    CUDASIM_STATUS(CUDNN_STATUS_RUNTIME_FP_OVERFLOW),
    CUDASIM_STATUS(CUDNN_STATUS_SUBLIBRARY_LOADING_FAILED),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM_NULL_POINTER),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM_MISALIGNED_POINTER),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM_NOT_FINALIZED),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM_OUT_OF_BOUND),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM_SIZE_INSUFFICIENT),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM_SHAPE_MISMATCH),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM_DUPLICATED_ENTRIES),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM_ATTRIBUTE_TYPE),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM_CUDA_GRAPH_MISMATCH),
    CUDASIM_STATUS(CUDNN_STATUS_BAD_PARAM_DESCRIPTOR_TYPE),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_GRAPH_PATTERN),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHAPE),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_DATA_TYPE),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_LAYOUT),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDA_DRIVER),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INCOMPATIBLE_CUDART),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_ARCH_MISMATCH),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_RUNTIME_PREREQUISITE_MISSING),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SUBLIBRARY_UNAVAILABLE),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_SHARED_MEMORY_INSUFFICIENT),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_PADDING),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_BAD_LAUNCH_PARAM),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_CUDA_GRAPH_NATIVE_API),
    CUDASIM_STATUS(CUDNN_STATUS_NOT_SUPPORTED_INVALID_DYNAMIC_SHAPE),
    CUDASIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR),
    CUDASIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_COMPILATION_FAILED),
    CUDASIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_UNEXPECTED_VALUE),
    CUDASIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_HOST_ALLOCATION_FAILED),
    CUDASIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_DEVICE_ALLOCATION_FAILED),
    CUDASIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_BAD_LAUNCH_PARAM),
    CUDASIM_STATUS(CUDNN_STATUS_INTERNAL_ERROR_TEXTURE_CREATION_FAILED),
    CUDASIM_STATUS(CUDNN_STATUS_EXECUTION_FAILED),
    CUDASIM_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDA_DRIVER),
    CUDASIM_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUBLAS),
    CUDASIM_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CUDART),
    CUDASIM_STATUS(CUDNN_STATUS_EXECUTION_FAILED_CURAND),
    {static_cast<cudnnStatus_t>(2001), "CUDNN_STATUS_INVALID_VALUE"},
};
#undef CUDASIM_STATUS

}  // namespace

extern "C" {

cudnnStatus_t cudnnCreate(cudnnHandle_t* handle) {
  if (handle == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnCreate: handle is NULL");
  int device = 0;
  bool unusable = false;
  const std::string why = cudasim::reserve_handle("cudnnCreate", kHandleBytes, &device, &unusable);
  if (!why.empty()) return fail(unusable ? CUDNN_STATUS_NOT_INITIALIZED : CUDNN_STATUS_ALLOC_FAILED, why);
  if (cudnnStatus_t st = create(handle, "cudnnCreate")) {
    cudasim::unreserve(device, kHandleBytes);
    return st;
  }
  (*handle)->device = device;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnDestroy(cudnnHandle_t handle) {
  if (handle == nullptr) return fail(CUDNN_STATUS_BAD_PARAM, "cudnnDestroy: handle is NULL");
  if (cudnnStatus_t st = check_handle(handle, "cudnnDestroy")) return st;
  const int device = handle->device;
  // Releasing the handle's resources synchronizes the device, as cuDNN documents.
  cudasim::synchronize_device(device);
  if (cudnnStatus_t st = destroy(handle, "cudnnDestroy")) return st;
  cudasim::unreserve(device, kHandleBytes);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetStream(cudnnHandle_t handle, cudaStream_t streamId) {
  if (cudnnStatus_t st = check_handle(handle, "cudnnSetStream")) return st;
  bool other_device = false;
  const std::string why = cudasim::check_handle_stream("cudnnSetStream", streamId, handle->device, &other_device);
  if (!why.empty()) return fail(other_device ? CUDNN_STATUS_BAD_PARAM_STREAM_MISMATCH : CUDNN_STATUS_BAD_PARAM, why);
  handle->stream = streamId;
  return CUDNN_STATUS_SUCCESS;
}

// The version of the headers the simulator was built with (CUDNN_VERSION: major * 10000 + minor * 100 + patch).
size_t cudnnGetVersion(void) { return CUDNN_VERSION; }

// Test hook: how many cudnnFind*AlgorithmEx calls (`timed` != 0) or cudnnGetConvolution*Algorithm_v7 calls
// (`timed` == 0) succeeded so far in this process.
unsigned long long tandem_cudasim_cudnn_algorithm_queries(int timed) {
  return timed != 0 ? g_finds.load() : g_heuristics.load();
}

const char* cudnnGetErrorString(cudnnStatus_t status) {
  for (const StatusName& s : kStatusNames)
    if (s.status == status) return s.name;
  return "CUDNN_STATUS_UNKNOWN";
}

void cudnnGetLastErrorString(char* message, size_t max_size) {
  if (message == nullptr || max_size == 0) return;
  const size_t n = std::min(max_size - 1, tl_last_error.size());
  std::memcpy(message, tl_last_error.data(), n);
  message[n] = '\0';
}

// cudnnCreate<Kind>Descriptor and cudnnDestroy<Kind>Descriptor: the same bookkeeping for every kind.
#define TD_SIM_DESCRIPTOR_LIFETIME(Kind)                                         \
  cudnnStatus_t cudnnCreate##Kind##Descriptor(cudnn##Kind##Descriptor_t* desc) { \
    return create(desc, "cudnnCreate" #Kind "Descriptor");                       \
  }                                                                              \
  cudnnStatus_t cudnnDestroy##Kind##Descriptor(cudnn##Kind##Descriptor_t desc) { \
    return destroy(desc, "cudnnDestroy" #Kind "Descriptor");                     \
  }

TD_SIM_DESCRIPTOR_LIFETIME(Tensor)

cudnnStatus_t cudnnSetTensor4dDescriptor(cudnnTensorDescriptor_t tensorDesc, cudnnTensorFormat_t format,
                                         cudnnDataType_t dataType, int n, int c, int h, int w) {
  return set_4d(tensorDesc, "cudnnSetTensor4dDescriptor", "tensor", format, dataType, n, c, h, w);
}

TD_SIM_DESCRIPTOR_LIFETIME(Filter)

cudnnStatus_t cudnnSetFilter4dDescriptor(cudnnFilterDescriptor_t filterDesc, cudnnDataType_t dataType,
                                         cudnnTensorFormat_t format, int k, int c, int h, int w) {
  // KCRS for CUDNN_TENSOR_NCHW, KRSC for CUDNN_TENSOR_NHWC: the same strides as a tensor's with n = k.
  return set_4d(filterDesc, "cudnnSetFilter4dDescriptor", "filter", format, dataType, k, c, h, w);
}

TD_SIM_DESCRIPTOR_LIFETIME(Convolution)

cudnnStatus_t cudnnSetConvolution2dDescriptor(cudnnConvolutionDescriptor_t convDesc, int pad_h, int pad_w, int u, int v,
                                              int dilation_h, int dilation_w, cudnnConvolutionMode_t mode,
                                              cudnnDataType_t computeType) {
  const std::string api = "cudnnSetConvolution2dDescriptor";
  if (!alive(convDesc)) return fail(CUDNN_STATUS_BAD_PARAM, api + ": not a live convolution descriptor");
  if (pad_h < 0 || pad_w < 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                api + ": negative padding " + std::to_string(pad_h) + ", " + std::to_string(pad_w));
  if (u <= 0 || v <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                api + ": strides must be positive, got " + std::to_string(u) + ", " + std::to_string(v));
  if (dilation_h <= 0 || dilation_w <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": dilations must be positive, got " + std::to_string(dilation_h) + ", " +
                                            std::to_string(dilation_w));
  if (mode != CUDNN_CONVOLUTION && mode != CUDNN_CROSS_CORRELATION)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": invalid mode " + std::to_string(mode));
  if (!valid_type(computeType))
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": invalid compute type " + std::to_string(computeType));
  convDesc->pad_h = pad_h, convDesc->pad_w = pad_w;
  convDesc->stride_h = u, convDesc->stride_w = v;
  convDesc->dil_h = dilation_h, convDesc->dil_w = dilation_w;
  convDesc->mode = mode;
  convDesc->compute = computeType;
  convDesc->set = true;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionGroupCount(cudnnConvolutionDescriptor_t convDesc, int groupCount) {
  const std::string api = "cudnnSetConvolutionGroupCount";
  if (!alive(convDesc)) return fail(CUDNN_STATUS_BAD_PARAM, api + ": not a live convolution descriptor");
  if (groupCount < 1)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": group count " + std::to_string(groupCount) + " is less than 1");
  convDesc->groups = groupCount;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnSetConvolutionMathType(cudnnConvolutionDescriptor_t convDesc, cudnnMathType_t mathType) {
  const std::string api = "cudnnSetConvolutionMathType";
  if (!alive(convDesc)) return fail(CUDNN_STATUS_BAD_PARAM, api + ": not a live convolution descriptor");
  if (mathType != CUDNN_DEFAULT_MATH && mathType != CUDNN_TENSOR_OP_MATH &&
      mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION && mathType != CUDNN_FMA_MATH)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": invalid math type " + std::to_string(mathType));
  convDesc->math = mathType;
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolution2dForwardOutputDim(const cudnnConvolutionDescriptor_t convDesc,
                                                    const cudnnTensorDescriptor_t inputTensorDesc,
                                                    const cudnnFilterDescriptor_t filterDesc, int* n, int* c, int* h,
                                                    int* w) {
  const std::string api = "cudnnGetConvolution2dForwardOutputDim";
  if (!alive(convDesc) || !convDesc->set)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": convDesc is not a set convolution descriptor");
  if (!alive(inputTensorDesc) || !inputTensorDesc->set)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": inputTensorDesc is not a set tensor descriptor");
  if (!alive(filterDesc) || !filterDesc->set)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": filterDesc is not a set filter descriptor");
  if (n == nullptr || c == nullptr || h == nullptr || w == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": an output pointer is NULL");
  const Dims& x = inputTensorDesc->dims;
  const Dims& f = filterDesc->dims;
  const int g = convDesc->groups;
  if (x.c != f.c * g)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": the input has " + std::to_string(x.c) + " channels but the filter " +
                                            dims_text(f) + " with group count " + std::to_string(g) + " takes " +
                                            std::to_string(int64_t{f.c} * g));
  if (f.n % g != 0)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": the filter's " + std::to_string(f.n) +
                                            " output channels are not a multiple of the group count " +
                                            std::to_string(g));
  const int64_t p = output_size(x.h, convDesc->pad_h, f.h, convDesc->dil_h, convDesc->stride_h);
  const int64_t q = output_size(x.w, convDesc->pad_w, f.w, convDesc->dil_w, convDesc->stride_w);
  if (p <= 0 || q <= 0)
    return fail(CUDNN_STATUS_BAD_PARAM,
                api + ": the dilated filter " + dims_text(f) + " is larger than the padded input " + dims_text(x));
  *n = x.n;
  *c = f.n;
  *h = static_cast<int>(p);
  *w = static_cast<int>(q);
  return CUDNN_STATUS_SUCCESS;
}

cudnnStatus_t cudnnGetConvolutionForwardWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                      const cudnnFilterDescriptor_t wDesc,
                                                      const cudnnConvolutionDescriptor_t convDesc,
                                                      const cudnnTensorDescriptor_t yDesc,
                                                      cudnnConvolutionFwdAlgo_t algo, size_t* sizeInBytes) {
  return workspace_size("cudnnGetConvolutionForwardWorkspaceSize", Pass::Forward, handle, kForward, xDesc, wDesc,
                        convDesc, yDesc, algo, sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataWorkspaceSize(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                           const cudnnTensorDescriptor_t dyDesc,
                                                           const cudnnConvolutionDescriptor_t convDesc,
                                                           const cudnnTensorDescriptor_t dxDesc,
                                                           cudnnConvolutionBwdDataAlgo_t algo, size_t* sizeInBytes) {
  return workspace_size("cudnnGetConvolutionBackwardDataWorkspaceSize", Pass::BackwardData, handle, kBackwardData,
                        dxDesc, wDesc, convDesc, dyDesc, algo, sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterWorkspaceSize(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                             const cudnnTensorDescriptor_t dyDesc,
                                                             const cudnnConvolutionDescriptor_t convDesc,
                                                             const cudnnFilterDescriptor_t gradDesc,
                                                             cudnnConvolutionBwdFilterAlgo_t algo,
                                                             size_t* sizeInBytes) {
  return workspace_size("cudnnGetConvolutionBackwardFilterWorkspaceSize", Pass::BackwardFilter, handle, kBackwardFilter,
                        xDesc, gradDesc, convDesc, dyDesc, algo, sizeInBytes);
}

cudnnStatus_t cudnnGetConvolutionForwardAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                     const cudnnFilterDescriptor_t filterDesc,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     const cudnnTensorDescriptor_t destDesc,
                                                     const int requestedAlgoCount, int* returnedAlgoCount,
                                                     cudnnConvolutionFwdAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      Pass::Forward, "cudnnGetConvolutionForwardAlgorithm_v7", handle, kForward, srcDesc, filterDesc, convDesc,
      destDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardDataAlgorithm_v7(
    cudnnHandle_t handle, const cudnnFilterDescriptor_t filterDesc, const cudnnTensorDescriptor_t diffDesc,
    const cudnnConvolutionDescriptor_t convDesc, const cudnnTensorDescriptor_t gradDesc, const int requestedAlgoCount,
    int* returnedAlgoCount, cudnnConvolutionBwdDataAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      Pass::BackwardData, "cudnnGetConvolutionBackwardDataAlgorithm_v7", handle, kBackwardData, gradDesc, filterDesc,
      convDesc, diffDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnGetConvolutionBackwardFilterAlgorithm_v7(cudnnHandle_t handle, const cudnnTensorDescriptor_t srcDesc,
                                                            const cudnnTensorDescriptor_t diffDesc,
                                                            const cudnnConvolutionDescriptor_t convDesc,
                                                            const cudnnFilterDescriptor_t gradDesc,
                                                            const int requestedAlgoCount, int* returnedAlgoCount,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perfResults) {
  return heuristics<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      Pass::BackwardFilter, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", handle, kBackwardFilter, srcDesc, gradDesc,
      convDesc, diffDesc, requestedAlgoCount, returnedAlgoCount, perfResults);
}

cudnnStatus_t cudnnFindConvolutionForwardAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                     const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
                                                     const cudnnConvolutionDescriptor_t convDesc,
                                                     const cudnnTensorDescriptor_t yDesc, void* y,
                                                     const int requestedAlgoCount, int* returnedAlgoCount,
                                                     cudnnConvolutionFwdAlgoPerf_t* perfResults, void* workSpace,
                                                     size_t workSpaceSizeInBytes) {
  return find<cudnnConvolutionFwdAlgoPerf_t, cudnnConvolutionFwdAlgo_t>(
      Pass::Forward, "cudnnFindConvolutionForwardAlgorithmEx", handle, kForward, xDesc, wDesc, convDesc, yDesc, x, w, y,
      requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardDataAlgorithmEx(cudnnHandle_t handle, const cudnnFilterDescriptor_t wDesc,
                                                          const void* w, const cudnnTensorDescriptor_t dyDesc,
                                                          const void* dy, const cudnnConvolutionDescriptor_t convDesc,
                                                          const cudnnTensorDescriptor_t dxDesc, void* dx,
                                                          const int requestedAlgoCount, int* returnedAlgoCount,
                                                          cudnnConvolutionBwdDataAlgoPerf_t* perfResults,
                                                          void* workSpace, size_t workSpaceSizeInBytes) {
  return find<cudnnConvolutionBwdDataAlgoPerf_t, cudnnConvolutionBwdDataAlgo_t>(
      Pass::BackwardData, "cudnnFindConvolutionBackwardDataAlgorithmEx", handle, kBackwardData, dxDesc, wDesc, convDesc,
      dyDesc, w, dy, dx, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnFindConvolutionBackwardFilterAlgorithmEx(cudnnHandle_t handle, const cudnnTensorDescriptor_t xDesc,
                                                            const void* x, const cudnnTensorDescriptor_t dyDesc,
                                                            const void* y, const cudnnConvolutionDescriptor_t convDesc,
                                                            const cudnnFilterDescriptor_t dwDesc, void* dw,
                                                            const int requestedAlgoCount, int* returnedAlgoCount,
                                                            cudnnConvolutionBwdFilterAlgoPerf_t* perfResults,
                                                            void* workSpace, size_t workSpaceSizeInBytes) {
  return find<cudnnConvolutionBwdFilterAlgoPerf_t, cudnnConvolutionBwdFilterAlgo_t>(
      Pass::BackwardFilter, "cudnnFindConvolutionBackwardFilterAlgorithmEx", handle, kBackwardFilter, xDesc, dwDesc,
      convDesc, dyDesc, x, y, dw, requestedAlgoCount, returnedAlgoCount, perfResults, workSpace, workSpaceSizeInBytes);
}

cudnnStatus_t cudnnConvolutionForward(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t xDesc,
                                      const void* x, const cudnnFilterDescriptor_t wDesc, const void* w,
                                      const cudnnConvolutionDescriptor_t convDesc, cudnnConvolutionFwdAlgo_t algo,
                                      void* workSpace, size_t workSpaceSizeInBytes, const void* beta,
                                      const cudnnTensorDescriptor_t yDesc, void* y) {
  return run("cudnnConvolutionForward", Pass::Forward, handle, kForward, alpha, beta, xDesc, wDesc, convDesc, yDesc,
             algo, workSpace, workSpaceSizeInBytes, x, w, y);
}

cudnnStatus_t cudnnConvolutionBackwardData(cudnnHandle_t handle, const void* alpha, const cudnnFilterDescriptor_t wDesc,
                                           const void* w, const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                           const cudnnConvolutionDescriptor_t convDesc,
                                           cudnnConvolutionBwdDataAlgo_t algo, void* workSpace,
                                           size_t workSpaceSizeInBytes, const void* beta,
                                           const cudnnTensorDescriptor_t dxDesc, void* dx) {
  return run("cudnnConvolutionBackwardData", Pass::BackwardData, handle, kBackwardData, alpha, beta, dxDesc, wDesc,
             convDesc, dyDesc, algo, workSpace, workSpaceSizeInBytes, w, dy, dx);
}

cudnnStatus_t cudnnConvolutionBackwardFilter(cudnnHandle_t handle, const void* alpha,
                                             const cudnnTensorDescriptor_t xDesc, const void* x,
                                             const cudnnTensorDescriptor_t dyDesc, const void* dy,
                                             const cudnnConvolutionDescriptor_t convDesc,
                                             cudnnConvolutionBwdFilterAlgo_t algo, void* workSpace,
                                             size_t workSpaceSizeInBytes, const void* beta,
                                             const cudnnFilterDescriptor_t dwDesc, void* dw) {
  return run("cudnnConvolutionBackwardFilter", Pass::BackwardFilter, handle, kBackwardFilter, alpha, beta, xDesc,
             dwDesc, convDesc, dyDesc, algo, workSpace, workSpaceSizeInBytes, x, dy, dw);
}

cudnnStatus_t cudnnAddTensor(cudnnHandle_t handle, const void* alpha, const cudnnTensorDescriptor_t aDesc,
                             const void* A, const void* beta, const cudnnTensorDescriptor_t cDesc, void* C) {
  const std::string api = "cudnnAddTensor";
  if (cudnnStatus_t st = check_handle(handle, "cudnnAddTensor")) return st;
  if (alpha == nullptr || beta == nullptr || A == nullptr || C == nullptr)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": a pointer argument is NULL");
  if (!alive(aDesc) || !aDesc->set) return fail(CUDNN_STATUS_BAD_PARAM, api + ": aDesc is not a set tensor descriptor");
  if (!alive(cDesc) || !cDesc->set) return fail(CUDNN_STATUS_BAD_PARAM, api + ": cDesc is not a set tensor descriptor");
  if (aDesc->type != cDesc->type)
    return fail(CUDNN_STATUS_BAD_PARAM, api + ": aDesc and cDesc have different data types");
  if (aDesc->type != CUDNN_DATA_FLOAT && aDesc->type != CUDNN_DATA_DOUBLE)
    return fail(CUDNN_STATUS_NOT_SUPPORTED,
                api + ": data type " + std::to_string(aDesc->type) + " is not simulated (float and double are)");
  const Dims a = aDesc->dims, c = cDesc->dims;
  const int as[] = {a.n, a.c, a.h, a.w}, cs[] = {c.n, c.c, c.h, c.w};
  for (int i = 0; i < 4; ++i)
    if (as[i] != cs[i] && as[i] != 1)
      return fail(CUDNN_STATUS_BAD_PARAM, api + ": A " + dims_text(a) + " does not broadcast to C " + dims_text(c) +
                                              " (each size of A must be C's or 1)");
  cudnnStatus_t st = CUDNN_STATUS_SUCCESS;
  std::shared_ptr<CUstream_st> stream = handle_stream(*handle, &st, "cudnnAddTensor");
  if (stream == nullptr) return st;
  const bool f64 = aDesc->type == CUDNN_DATA_DOUBLE;
  const size_t element = f64 ? 8 : 4;
  const double al = scalar(alpha, f64), be = scalar(beta, f64);
  const std::vector<cudasim::Access> accesses = {{A, cudasim::cudnn::extent_bytes(a, element), api + " A"},
                                                 {C, cudasim::cudnn::extent_bytes(c, element), api + " C"}};
  cudasim::enqueue_checked(stream.get(), handle->device, api, accesses,
                           [=] { cudasim::cudnn::add_tensor(f64, al, a, A, be, c, C); });
  return CUDNN_STATUS_SUCCESS;
}

}  // extern "C"
