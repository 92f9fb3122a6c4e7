// The CUDA NN backend's convolutions, through cuDNN: descriptors built per call; the algorithm and its math
// type found once per shape with cudnnFind*AlgorithmEx, and the workspace size of that pair, cached; workspace
// from the caching allocator (Workspace category).
#include <algorithm>
#include <array>
#include <climits>
#include <functional>
#include <map>
#include <mutex>
#include <optional>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/nn/cuda_nn_backend.h"
#include "kernels/cudnn/conv_choice.h"
#include "kernels/cudnn/cudnn_check.h"
#include "kernels/cudnn/handle.h"
#include "runtime/base/config.h"
#include "runtime/base/error.h"
#include "runtime/base/non_copyable.h"
#include "runtime/memory/storage.h"

namespace tandem {
namespace cudnn {

namespace {

// The most workspace an algorithm may use: a slower algorithm within it beats a faster one beyond it.
constexpr size_t kMaxWorkspace = size_t{512} << 20;

enum class Pass : int64_t { Forward, BackwardData, BackwardFilter };
const char* pass_name(Pass p) {
  return p == Pass::Forward ? "forward" : (p == Pass::BackwardData ? "backward data" : "backward weight");
}

cudnnDataType_t data_type(DType t) {
  switch (t) {
    case DType::F32: return CUDNN_DATA_FLOAT;
    case DType::F64: return CUDNN_DATA_DOUBLE;
    default: TD_THROW(DTypeError, "conv2d on CUDA supports f32 and f64, not ", dtype_name(t));
  }
}

int to_int(int64_t v) {
  TD_CHECK_SHAPE(v <= INT_MAX, "conv2d on CUDA: size ", v, " exceeds cuDNN's 32-bit limit");
  return static_cast<int>(v);
}

// cuDNN's legacy 4-d descriptors keep strides in int too, and take tensors of fewer than 2^31 elements only,
// however small each dimension is.
void check_elements(const char* tensor, int64_t a, int64_t b, int64_t c, int64_t d) {
  const int64_t n = a * b * c * d;
  TD_CHECK_SHAPE(n <= INT_MAX, "conv2d on CUDA: the ", tensor, " [", a, ", ", b, ", ", c, ", ", d, "] has ", n,
                 " elements; cuDNN's legacy API takes fewer than 2^31 per tensor (use a smaller batch)");
}

// TF32 tensor cores for f32 only when allowed; otherwise plain FMA kernels (exact f32 products).
cudnnMathType_t requested_math(DType t, bool tf32) {
  if (t != DType::F32) return CUDNN_DEFAULT_MATH;
  return tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
}

// Owns one cuDNN descriptor of type T, made by Create and released by Destroy.
template <typename T, cudnnStatus_t (*Create)(T*), cudnnStatus_t (*Destroy)(T)>
struct Desc : NonCopyable {
  T d = nullptr;
  Desc() { TD_CUDNN_CHECK(Create(&d)); }
  ~Desc() { Destroy(d); }
};
using TensorDesc = Desc<cudnnTensorDescriptor_t, cudnnCreateTensorDescriptor, cudnnDestroyTensorDescriptor>;
using FilterDesc = Desc<cudnnFilterDescriptor_t, cudnnCreateFilterDescriptor, cudnnDestroyFilterDescriptor>;
using ConvDesc =
    Desc<cudnnConvolutionDescriptor_t, cudnnCreateConvolutionDescriptor, cudnnDestroyConvolutionDescriptor>;

// The descriptors of one convolution: NCHW/OIHW or NHWC/OHWI, the math type as requested.
struct Descriptors {
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;
  Descriptors(const Conv2dGeometry& g, cudnnMathType_t math) {
    const cudnnTensorFormat_t format = g.channels_last ? CUDNN_TENSOR_NHWC : CUDNN_TENSOR_NCHW;
    const cudnnDataType_t dt = data_type(g.dtype);
    check_elements("input", g.n, g.c, g.h, g.w);
    check_elements("output", g.n, g.o, g.oh, g.ow);
    check_elements("weight", g.o, g.c / g.groups, g.kh, g.kw);
    TD_CUDNN_CHECK(cudnnSetTensor4dDescriptor(x.d, format, dt, to_int(g.n), to_int(g.c), to_int(g.h), to_int(g.w)));
    TD_CUDNN_CHECK(cudnnSetTensor4dDescriptor(y.d, format, dt, to_int(g.n), to_int(g.o), to_int(g.oh), to_int(g.ow)));
    TD_CUDNN_CHECK(cudnnSetTensor4dDescriptor(bias.d, format, dt, 1, to_int(g.o), 1, 1));
    TD_CUDNN_CHECK(
        cudnnSetFilter4dDescriptor(w.d, dt, format, to_int(g.o), to_int(g.c / g.groups), to_int(g.kh), to_int(g.kw)));
    TD_CUDNN_CHECK(cudnnSetConvolution2dDescriptor(conv.d, to_int(g.pad_h), to_int(g.pad_w), to_int(g.stride_h),
                                                   to_int(g.stride_w), to_int(g.dilation_h), to_int(g.dilation_w),
                                                   CUDNN_CROSS_CORRELATION, dt));
    TD_CUDNN_CHECK(cudnnSetConvolutionGroupCount(conv.d, to_int(g.groups)));
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(conv.d, math));
    int n = 0, c = 0, h = 0, w_out = 0;
    TD_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv.d, x.d, w.d, &n, &c, &h, &w_out));
    TD_ASSERT(n == g.n && c == g.o && h == g.oh && w_out == g.ow, "cuDNN computes a conv2d output of [", n, ", ", c,
              ", ", h, ", ", w_out, "], Tandem [", g.n, ", ", g.o, ", ", g.oh, ", ", g.ow, "]");
  }
};

// alpha = 1 and beta = 0 in the scaling type cuDNN expects (double for f64 data, float otherwise).
struct Scalars {
  float f1 = 1.f, f0 = 0.f;
  double d1 = 1.0, d0 = 0.0;
  const void* one(DType t) const { return t == DType::F64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(DType t) const { return t == DType::F64 ? static_cast<const void*>(&d0) : &f0; }
};

using Key = std::array<int64_t, 4 + std::tuple_size<Conv2dKey>::value>;
Key key_of(Pass pass, const Conv2dGeometry& g, int device, bool det, bool tf32) {
  Key key{static_cast<int64_t>(pass), device, det, tf32};
  const Conv2dKey shape = conv2d_key(g);
  std::copy(shape.begin(), shape.end(), key.begin() + 4);
  return key;
}

// The cached choice for `key`, found with `find` on the first call.
ConvChoice cached_choice(const Key& key, const std::function<ConvChoice()>& find) {
  static std::mutex mu;
  static std::map<Key, ConvChoice> cache;
  {
    std::lock_guard<std::mutex> lock(mu);
    auto it = cache.find(key);
    if (it != cache.end()) return it->second;
  }
  ConvChoice c = find();  // outside the lock: benchmarking takes a while; a duplicate search is harmless
  std::lock_guard<std::mutex> lock(mu);
  return cache.emplace(key, c).first->second;
}

// choose_conv_algorithm's choice among Find's `results`, asking cuDNN (`size_of`, with the convolution
// descriptor's math type set) for the workspace of the algorithm and math type that will run.
template <typename Perf>
ConvChoice pick(const Perf* results, int count, cudnnConvolutionDescriptor_t conv, bool det, cudnnMathType_t requested,
                Pass pass, const Conv2dGeometry& g, const std::function<cudnnStatus_t(int, size_t*)>& size_of) {
  auto workspace_of = [&](int algo, cudnnMathType_t math, size_t* bytes) {
    cudnnStatus_t st = cudnnSetConvolutionMathType(conv, math);
    return st == CUDNN_STATUS_SUCCESS ? size_of(algo, bytes) : st;
  };
  std::optional<ConvChoice> c = choose_conv_algorithm(results, count, det, requested, kMaxWorkspace, workspace_of);
  if (c) return *c;
  TD_THROW(BackendError, "cuDNN offers no ", det ? "deterministic " : "", "algorithm for conv2d ", pass_name(pass),
           " of input [", g.n, ", ", g.c, ", ", g.h, ", ", g.w, "] with weight [", g.o, ", ", g.c / g.groups, ", ",
           g.kh, ", ", g.kw, "], groups ", g.groups, g.channels_last ? " (channels-last)" : "");
}

// The largest workspace any algorithm of a pass asks for (those that cannot run are skipped), capped.
size_t search_workspace(int count, const std::function<cudnnStatus_t(int, size_t*)>& size_of) {
  size_t most = 0;
  for (int a = 0; a < count; ++a) {
    size_t bytes = 0;
    if (size_of(a, &bytes) == CUDNN_STATUS_SUCCESS) most = std::max(most, bytes);
  }
  return std::min(most, kMaxWorkspace);
}

void* data_of(const Storage& s) { return s.defined() ? s.data() : nullptr; }

// Everything one cuDNN call needs: the stream's device, the handle, descriptors and the switches.
struct Call {
  cuda::LaunchScope scope;
  cudnnHandle_t handle;
  bool det, tf32;
  cudnnMathType_t math;
  Descriptors d;
  Scalars scalars;
  Call(const Conv2dGeometry& g, const Stream& s)
      : scope(s),
        handle(cudnn_handle(scope.device(), scope.stream())),
        det(deterministic()),
        tf32(allow_tf32()),
        math(requested_math(g.dtype, tf32)),
        d(g, math) {}
  // Applies a choice: its math type, and workspace (freed in stream order with the returned Storage).
  Storage prepare(const ConvChoice& c, const Stream& s) {
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(d.conv.d, c.math));
    return c.workspace > 0 ? cuda::workspace(c.workspace, s) : Storage();
  }
  // The cached choice for `pass` of this shape; on a miss, cuDNN's Find for the pass (`find`: into Count
  // results, with a workspace as large as any of its algorithms asks for) and pick's choice among the results.
  template <typename Perf, int Count, typename SizeOf, typename Find>
  ConvChoice choose(Pass pass, const Conv2dGeometry& g, const Stream& s, const SizeOf& size_of, const Find& find) {
    return cached_choice(key_of(pass, g, scope.device(), det, tf32), [&] {
      size_t limit = search_workspace(Count, size_of);
      Storage ws = limit > 0 ? cuda::workspace(limit, s) : Storage();
      Perf perf[Count];
      int returned = 0;
      find(perf, returned, ws, limit);
      return pick(perf, returned, d.conv.d, det, math, pass, g, size_of);
    });
  }
};

}  // namespace
}  // namespace cudnn

namespace cuda {

using namespace cudnn;  // this file's helpers

void CudaNNBackend::conv2d_forward(const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y,
                                   const Stream& s) {
  Call call(g, s);
  Descriptors& d = call.d;
  ConvChoice c = call.choose<cudnnConvolutionFwdAlgoPerf_t, CUDNN_CONVOLUTION_FWD_ALGO_COUNT>(
      Pass::Forward, g, s,
      [&](int a, size_t* bytes) {
        return cudnnGetConvolutionForwardWorkspaceSize(call.handle, d.x.d, d.w.d, d.conv.d, d.y.d,
                                                       static_cast<cudnnConvolutionFwdAlgo_t>(a), bytes);
      },
      [&](cudnnConvolutionFwdAlgoPerf_t* perf, int& returned, const Storage& ws, size_t limit) {
        TD_CUDNN_CHECK(cudnnFindConvolutionForwardAlgorithmEx(call.handle, d.x.d, x, d.w.d, w, d.conv.d, d.y.d, y,
                                                              CUDNN_CONVOLUTION_FWD_ALGO_COUNT, &returned, perf,
                                                              data_of(ws), limit));
      });
  Storage ws = call.prepare(c, s);
  TD_CUDNN_CHECK(cudnnConvolutionForward(call.handle, call.scalars.one(g.dtype), d.x.d, x, d.w.d, w, d.conv.d,
                                         static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), data_of(ws), c.workspace,
                                         call.scalars.zero(g.dtype), d.y.d, y));
  if (bias != nullptr)
    TD_CUDNN_CHECK(
        cudnnAddTensor(call.handle, call.scalars.one(g.dtype), d.bias.d, bias, call.scalars.one(g.dtype), d.y.d, y));
}

void CudaNNBackend::conv2d_backward_data(const Conv2dGeometry& g, const void* dy, const void* w, void* dx,
                                         const Stream& s) {
  Call call(g, s);
  Descriptors& d = call.d;
  ConvChoice c = call.choose<cudnnConvolutionBwdDataAlgoPerf_t, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT>(
      Pass::BackwardData, g, s,
      [&](int a, size_t* bytes) {
        return cudnnGetConvolutionBackwardDataWorkspaceSize(call.handle, d.w.d, d.y.d, d.conv.d, d.x.d,
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(a), bytes);
      },
      [&](cudnnConvolutionBwdDataAlgoPerf_t* perf, int& returned, const Storage& ws, size_t limit) {
        TD_CUDNN_CHECK(cudnnFindConvolutionBackwardDataAlgorithmEx(call.handle, d.w.d, w, d.y.d, dy, d.conv.d, d.x.d,
                                                                   dx, CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT, &returned,
                                                                   perf, data_of(ws), limit));
      });
  Storage ws = call.prepare(c, s);
  TD_CUDNN_CHECK(cudnnConvolutionBackwardData(call.handle, call.scalars.one(g.dtype), d.w.d, w, d.y.d, dy, d.conv.d,
                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), data_of(ws),
                                              c.workspace, call.scalars.zero(g.dtype), d.x.d, dx));
}

void CudaNNBackend::conv2d_backward_weight(const Conv2dGeometry& g, const void* x, const void* dy, void* dw,
                                           const Stream& s) {
  Call call(g, s);
  Descriptors& d = call.d;
  ConvChoice c = call.choose<cudnnConvolutionBwdFilterAlgoPerf_t, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT>(
      Pass::BackwardFilter, g, s,
      [&](int a, size_t* bytes) {
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(call.handle, d.x.d, d.y.d, d.conv.d, d.w.d,
                                                              static_cast<cudnnConvolutionBwdFilterAlgo_t>(a), bytes);
      },
      [&](cudnnConvolutionBwdFilterAlgoPerf_t* perf, int& returned, const Storage& ws, size_t limit) {
        TD_CUDNN_CHECK(cudnnFindConvolutionBackwardFilterAlgorithmEx(call.handle, d.x.d, x, d.y.d, dy, d.conv.d, d.w.d,
                                                                     dw, CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT,
                                                                     &returned, perf, data_of(ws), limit));
      });
  Storage ws = call.prepare(c, s);
  TD_CUDNN_CHECK(cudnnConvolutionBackwardFilter(call.handle, call.scalars.one(g.dtype), d.x.d, x, d.y.d, dy, d.conv.d,
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), data_of(ws),
                                                c.workspace, call.scalars.zero(g.dtype), d.w.d, dw));
}

}  // namespace cuda
}  // namespace tandem
