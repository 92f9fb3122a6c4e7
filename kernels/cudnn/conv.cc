// The CUDA NN backend's convolutions, through cuDNN: descriptors built once per shape and thread
// (conv_descriptors.h); each pass's algorithm and math type chosen once per shape (conv_algos.h: cuDNN's
// heuristics, or its timed search in benchmark mode, kept on disk); workspace from the stream's cached buffer
// (cuda::workspace, Workspace category). A channels-last pass for which cuDNN offers no algorithm runs in NCHW
// through layout copies (nchw_fallback.h), said once on stderr.
#include <cstdio>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <utility>

#include "kernels/cuda/launch.h"
#include "kernels/cuda/nn/cuda_nn_backend.h"
#include "kernels/cuda/nn/depthwise.h"
#include "kernels/cudnn/conv_algos.h"
#include "kernels/cudnn/conv_choice.h"
#include "kernels/cudnn/conv_descriptors.h"
#include "kernels/cudnn/conv_pass.h"
#include "kernels/cudnn/cudnn_check.h"
#include "kernels/cudnn/handle.h"
#include "kernels/cudnn/nchw_fallback.h"
#include "runtime/base/config.h"
#include "runtime/base/dtype.h"
#include "runtime/base/error.h"
#include "runtime/memory/storage.h"

namespace tandem {
namespace cudnn {

namespace {

// TF32 tensor cores for f32 only when allowed; otherwise plain FMA kernels (exact f32 products). bf16 runs on
// tensor cores (its products are exact in their f32 accumulators).
cudnnMathType_t requested_math(DType t, bool tf32) {
  if (t == DType::BF16) return CUDNN_TENSOR_OP_MATH;
  if (t != DType::F32) return CUDNN_DEFAULT_MATH;
  return tf32 ? CUDNN_TENSOR_OP_MATH : CUDNN_FMA_MATH;
}

// alpha = 1 and beta = 0 in the scaling type cuDNN expects (double for f64 data, float otherwise).
struct Scalars {
  float f1 = 1.f, f0 = 0.f;
  double d1 = 1.0, d0 = 0.0;
  const void* one(DType t) const { return t == DType::F64 ? static_cast<const void*>(&d1) : &f1; }
  const void* zero(DType t) const { return t == DType::F64 ? static_cast<const void*>(&d0) : &f0; }
};

void* data_of(const Storage& s) { return s.defined() ? s.data() : nullptr; }

// Whether an algorithm query answered: a status of the not-supported category means cuDNN has nothing for the
// problem (as an answer without a usable result does); any other failure is an error.
bool answered(cudnnStatus_t status, const char* query) {
  if (CUDNN_STATUS_CATEGORY(status) == CUDNN_STATUS_NOT_SUPPORTED) return false;
  if (status != CUDNN_STATUS_SUCCESS) detail::raise_cudnn(status, query, __FILE__, __LINE__);
  return true;
}

// Results per query: every algorithm of a pass, with each math type cuDNN may report it under.
constexpr int kFwdResults = 2 * CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
constexpr int kBwdDataResults = 2 * CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
constexpr int kBwdFilterResults = 2 * CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;

// One pass of one convolution: the stream's device and handle, the descriptors, the switches in force, and the
// pass's cuDNN calls.
class PassCall {
 public:
  PassCall(ConvPass pass, const Conv2dGeometry& g, const Stream& s)
      : scope_(s),
        s_(s),
        g_(g),
        pass_(pass),
        handle_(cudnn_handle(scope_.device(), scope_.stream())),
        det_(deterministic()),
        tf32_(allow_tf32()),
        benchmark_(cudnn_benchmark()),
        math_(requested_math(g.dtype, tf32_)),
        d_(conv_descriptors(g)) {}

  // The algorithm for this pass and shape (conv_algos.h); nullopt when cuDNN has none. In benchmark mode the
  // search runs on o's buffers and leaves arbitrary values in o.out (in scratch when o.out is accumulated into).
  std::optional<ConvChoice> choose(const ConvOperands& o) {
    ConvProblem p;
    p.pass = pass_;
    p.g = g_;
    p.device = scope_.device();
    p.deterministic = det_;
    p.tf32 = tf32_;
    p.benchmark = benchmark_;
    const WorkspaceQuery runs = [this](int algo, cudnnMathType_t math, size_t* bytes) {
      cudnnStatus_t st = cudnnSetConvolutionMathType(d_->conv.d, math);
      return st == CUDNN_STATUS_SUCCESS ? workspace_size(algo, bytes) : st;
    };
    return choose_conv(p, runs, [&] { return benchmark_ ? find(o, runs) : heuristic(runs); });
  }

  // Runs the pass with choice c, and adds `bias` to a forward pass's output.
  void run(const ConvChoice& c, const ConvOperands& o, const void* bias) {
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(d_->conv.d, c.math));
    const Storage ws = c.workspace > 0 ? cuda::workspace(c.workspace, s_) : Storage();
    const void *one = scalars_.one(g_.dtype), *zero = scalars_.zero(g_.dtype), *beta = o.accumulate ? one : zero;
    switch (pass_) {
      case ConvPass::Forward:
        TD_CUDNN_CHECK(cudnnConvolutionForward(handle_, one, d_->x.d, o.in0, d_->w.d, o.in1, d_->conv.d,
                                               static_cast<cudnnConvolutionFwdAlgo_t>(c.algo), data_of(ws), c.workspace,
                                               zero, d_->y.d, o.out));
        if (bias != nullptr) TD_CUDNN_CHECK(cudnnAddTensor(handle_, one, d_->bias.d, bias, one, d_->y.d, o.out));
        break;
      case ConvPass::BackwardData:
        TD_CUDNN_CHECK(cudnnConvolutionBackwardData(handle_, one, d_->w.d, o.in1, d_->y.d, o.in0, d_->conv.d,
                                                    static_cast<cudnnConvolutionBwdDataAlgo_t>(c.algo), data_of(ws),
                                                    c.workspace, beta, d_->x.d, o.out));
        break;
      case ConvPass::BackwardFilter:
        TD_CUDNN_CHECK(cudnnConvolutionBackwardFilter(handle_, one, d_->x.d, o.in0, d_->y.d, o.in1, d_->conv.d,
                                                      static_cast<cudnnConvolutionBwdFilterAlgo_t>(c.algo), data_of(ws),
                                                      c.workspace, zero, d_->w.d, o.out));
        break;
    }
  }

 private:
  // cudnnGet*WorkspaceSize for `algo` under the convolution descriptor's math type.
  cudnnStatus_t workspace_size(int algo, size_t* bytes) {
    switch (pass_) {
      case ConvPass::Forward:
        return cudnnGetConvolutionForwardWorkspaceSize(handle_, d_->x.d, d_->w.d, d_->conv.d, d_->y.d,
                                                       static_cast<cudnnConvolutionFwdAlgo_t>(algo), bytes);
      case ConvPass::BackwardData:
        return cudnnGetConvolutionBackwardDataWorkspaceSize(handle_, d_->w.d, d_->y.d, d_->conv.d, d_->x.d,
                                                            static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), bytes);
      case ConvPass::BackwardFilter:
        return cudnnGetConvolutionBackwardFilterWorkspaceSize(
            handle_, d_->x.d, d_->y.d, d_->conv.d, d_->w.d, static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), bytes);
    }
    return CUDNN_STATUS_BAD_PARAM;
  }

  // The bytes of the tensor the pass writes.
  size_t output_bytes() const {
    const int64_t n = pass_ == ConvPass::Forward        ? g_.n * g_.o * g_.oh * g_.ow
                      : pass_ == ConvPass::BackwardData ? g_.n * g_.c * g_.h * g_.w
                                                        : conv2d_weight_elements(g_);
    return static_cast<size_t>(n) * dtype_size(g_.dtype);
  }

  int algo_count() const {
    switch (pass_) {
      case ConvPass::Forward: return CUDNN_CONVOLUTION_FWD_ALGO_COUNT;
      case ConvPass::BackwardData: return CUDNN_CONVOLUTION_BWD_DATA_ALGO_COUNT;
      case ConvPass::BackwardFilter: return CUDNN_CONVOLUTION_BWD_FILTER_ALGO_COUNT;
    }
    return 0;
  }

  // The choice among the `n` ranked results `r` of a query that returned `status`.
  template <typename Perf>
  std::optional<ConvChoice> pick(cudnnStatus_t status, const char* query, const Perf* r, int n,
                                 const WorkspaceQuery& runs) {
    if (!answered(status, query)) return std::nullopt;
    return choose_conv_algorithm(r, n, det_, math_, kMaxConvWorkspace, runs);
  }

  // cuDNN's ranked heuristic results, chosen from in its order.
  std::optional<ConvChoice> heuristic(const WorkspaceQuery& runs) {
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(d_->conv.d, math_));
    int n = 0;
    switch (pass_) {
      case ConvPass::Forward: {
        cudnnConvolutionFwdAlgoPerf_t r[kFwdResults];
        const cudnnStatus_t status =
            cudnnGetConvolutionForwardAlgorithm_v7(handle_, d_->x.d, d_->w.d, d_->conv.d, d_->y.d, kFwdResults, &n, r);
        return pick(status, "cudnnGetConvolutionForwardAlgorithm_v7", r, n, runs);
      }
      case ConvPass::BackwardData: {
        cudnnConvolutionBwdDataAlgoPerf_t r[kBwdDataResults];
        const cudnnStatus_t status = cudnnGetConvolutionBackwardDataAlgorithm_v7(handle_, d_->w.d, d_->y.d, d_->conv.d,
                                                                                 d_->x.d, kBwdDataResults, &n, r);
        return pick(status, "cudnnGetConvolutionBackwardDataAlgorithm_v7", r, n, runs);
      }
      case ConvPass::BackwardFilter: {
        cudnnConvolutionBwdFilterAlgoPerf_t r[kBwdFilterResults];
        const cudnnStatus_t status = cudnnGetConvolutionBackwardFilterAlgorithm_v7(
            handle_, d_->x.d, d_->y.d, d_->conv.d, d_->w.d, kBwdFilterResults, &n, r);
        return pick(status, "cudnnGetConvolutionBackwardFilterAlgorithm_v7", r, n, runs);
      }
    }
    return std::nullopt;
  }

  // cuDNN's timed search on o's buffers, with a workspace as large as any algorithm asks for (capped).
  std::optional<ConvChoice> find(const ConvOperands& given, const WorkspaceQuery& runs) {
    ConvOperands o = given;
    Storage out_scratch;
    if (o.accumulate) {
      out_scratch = cuda::scratch(output_bytes(), s_);
      o.out = out_scratch.data();
    }
    size_t limit = 0;
    for (int a = 0; a < algo_count(); ++a) {
      size_t bytes = 0;
      if (runs(a, math_, &bytes) == CUDNN_STATUS_SUCCESS) limit = std::max(limit, std::min(bytes, kMaxConvWorkspace));
    }
    TD_CUDNN_CHECK(cudnnSetConvolutionMathType(d_->conv.d, math_));
    // Scratch of its own, not the stream's cached workspace, which it would grow to the search's largest need.
    const Storage ws = limit > 0 ? cuda::scratch(limit, s_) : Storage();
    int n = 0;
    switch (pass_) {
      case ConvPass::Forward: {
        cudnnConvolutionFwdAlgoPerf_t r[kFwdResults];
        const cudnnStatus_t status =
            cudnnFindConvolutionForwardAlgorithmEx(handle_, d_->x.d, o.in0, d_->w.d, o.in1, d_->conv.d, d_->y.d, o.out,
                                                   kFwdResults, &n, r, data_of(ws), limit);
        return pick(status, "cudnnFindConvolutionForwardAlgorithmEx", r, n, runs);
      }
      case ConvPass::BackwardData: {
        cudnnConvolutionBwdDataAlgoPerf_t r[kBwdDataResults];
        const cudnnStatus_t status =
            cudnnFindConvolutionBackwardDataAlgorithmEx(handle_, d_->w.d, o.in1, d_->y.d, o.in0, d_->conv.d, d_->x.d,
                                                        o.out, kBwdDataResults, &n, r, data_of(ws), limit);
        return pick(status, "cudnnFindConvolutionBackwardDataAlgorithmEx", r, n, runs);
      }
      case ConvPass::BackwardFilter: {
        cudnnConvolutionBwdFilterAlgoPerf_t r[kBwdFilterResults];
        const cudnnStatus_t status =
            cudnnFindConvolutionBackwardFilterAlgorithmEx(handle_, d_->x.d, o.in0, d_->y.d, o.in1, d_->conv.d, d_->w.d,
                                                          o.out, kBwdFilterResults, &n, r, data_of(ws), limit);
        return pick(status, "cudnnFindConvolutionBackwardFilterAlgorithmEx", r, n, runs);
      }
    }
    return std::nullopt;
  }

  cuda::LaunchScope scope_;
  Stream s_;
  Conv2dGeometry g_;
  ConvPass pass_;
  cudnnHandle_t handle_;
  bool det_, tf32_, benchmark_;
  cudnnMathType_t math_;
  std::shared_ptr<ConvDescriptors> d_;
  Scalars scalars_;
};

// Runs the pass if cuDNN has an algorithm for it; false if not (nothing was queued but a search).
bool try_pass(ConvPass pass, const Conv2dGeometry& g, const ConvOperands& o, const void* bias, const Stream& s) {
  PassCall call(pass, g, s);
  const std::optional<ConvChoice> c = call.choose(o);
  if (!c) return false;
  call.run(*c, o, bias);
  return true;
}

std::string shape_text(const Conv2dGeometry& g) {
  return "input [" + std::to_string(g.n) + ", " + std::to_string(g.c) + ", " + std::to_string(g.h) + ", " +
         std::to_string(g.w) + "] with weight [" + std::to_string(g.o) + ", " + std::to_string(g.c / g.groups) + ", " +
         std::to_string(g.kh) + ", " + std::to_string(g.kw) + "], groups " + std::to_string(g.groups);
}

// Said once per pass and data type, the first time cuDNN has no channels-last algorithm for them.
void say_fallback(ConvPass pass, const Conv2dGeometry& g) {
  static std::mutex mu;
  static std::set<std::pair<int, int>> said;
  std::lock_guard<std::mutex> lock(mu);
  if (!said.insert({static_cast<int>(pass), static_cast<int>(g.dtype)}).second) return;
  std::fprintf(stderr,
               "tandem: cuDNN offers no channels-last algorithm for conv2d %s in %s (first: %s); such passes run in "
               "NCHW through layout copies (same results, more memory traffic)\n",
               pass_name(pass), dtype_name(g.dtype), shape_text(g).c_str());
}

// One pass: in its own layout, else (channels-last without an algorithm) in NCHW; a valid convolution cuDNN
// runs in neither is an error naming it.
void convolve(ConvPass pass, const Conv2dGeometry& g, const ConvOperands& o, const void* bias, const Stream& s) {
  if (try_pass(pass, g, o, bias, s)) return;
  if (g.channels_last) {
    say_fallback(pass, g);
    count_conv_fallback();
    if (run_in_nchw(pass, g, o, s, [&](const Conv2dGeometry& nchw, const ConvOperands& t) {
          return try_pass(pass, nchw, t, bias, s);
        }))
      return;
  }
  TD_THROW(BackendError, "cuDNN offers no ", deterministic() ? "deterministic " : "", "algorithm for conv2d ",
           pass_name(pass), " of ", dtype_name(g.dtype), " ", shape_text(g),
           g.channels_last ? " (channels-last or NCHW)" : "");
}

}  // namespace
}  // namespace cudnn

namespace cuda {

void CudaNNBackend::conv2d_forward(const Conv2dForwardArgs& args, const Stream& s) {
  TD_CHECK(args.bias == nullptr || args.g.dtype != DType::BF16,
           "conv2d_forward in bf16 takes no bias (conv2d adds it to the rounded result)");
  if (depthwise_kernels_take(args.g)) return depthwise_forward(args, s);
  cudnn::convolve(cudnn::ConvPass::Forward, args.g, {args.x, args.w, args.y}, args.bias, s);
}

void CudaNNBackend::conv2d_backward_data(const Conv2dBackwardDataArgs& args, const Stream& s) {
  if (depthwise_kernels_take(args.g)) return depthwise_backward_data(args, s);
  cudnn::convolve(cudnn::ConvPass::BackwardData, args.g, {args.dy, args.w, args.dx, args.accumulate}, nullptr, s);
}

void CudaNNBackend::conv2d_backward_weight(const Conv2dBackwardWeightArgs& args, const Stream& s) {
  if (depthwise_kernels_take(args.g)) return depthwise_backward_weight(args, s);
  cudnn::convolve(cudnn::ConvPass::BackwardFilter, args.g, {args.x, args.dy, args.dw}, nullptr, s);
}

}  // namespace cuda
}  // namespace tandem
