// The per-thread cache of cuDNN convolution descriptors.
#include "kernels/cudnn/conv_descriptors.h"

#include <climits>

#include "runtime/base/error.h"
#include "runtime/base/lru_cache.h"

namespace tandem {
namespace cudnn {

namespace {

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

}  // namespace

ConvDescriptors::ConvDescriptors(const Conv2dGeometry& g) {
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
  int n = 0, c = 0, h = 0, w_out = 0;
  TD_CUDNN_CHECK(cudnnGetConvolution2dForwardOutputDim(conv.d, x.d, w.d, &n, &c, &h, &w_out));
  TD_ASSERT(n == g.n && c == g.o && h == g.oh && w_out == g.ow, "cuDNN computes a conv2d output of [", n, ", ", c, ", ",
            h, ", ", w_out, "], Tandem [", g.n, ", ", g.o, ", ", g.oh, ", ", g.ow, "]");
}

std::shared_ptr<ConvDescriptors> conv_descriptors(const Conv2dGeometry& g) {
  // Per thread: a convolution sets the math type on its descriptor, which another thread's must not see.
  thread_local LruCache<Conv2dKey, std::shared_ptr<ConvDescriptors>> cache(kConvDescriptorShapes);
  const Conv2dKey key = conv2d_key(g);
  if (std::shared_ptr<ConvDescriptors>* held = cache.find(key)) return *held;
  return cache.put(key, std::make_shared<ConvDescriptors>(g));
}

}  // namespace cudnn
}  // namespace tandem
