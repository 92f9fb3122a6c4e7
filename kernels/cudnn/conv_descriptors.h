// The cuDNN descriptors of a convolution shape (input, output, bias, filter, convolution), built once per shape
// and thread and kept in a bounded cache, so that a steady-state step creates none (building and destroying five
// descriptors per call was most of a convolution's host time at small images).
#pragma once

#include <cudnn.h>

#include <cstddef>
#include <memory>

#include "kernels/cudnn/cudnn_check.h"
#include "runtime/base/non_copyable.h"
#include "runtime/nn/nn_backend.h"

namespace tandem {
namespace cudnn {

// Shapes whose descriptors a thread keeps; the least recently used set is destroyed to make room for another. A
// set is five small host objects; ResNet-50 trained at two batch sizes uses about 50 shapes.
constexpr size_t kConvDescriptorShapes = 1024;

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

// x [n, c, h, w], y [n, o, oh, ow] and bias [1, o, 1, 1] in NCHW or NHWC, w [o, c / groups, kh, kw] in OIHW or
// OHWI (g.channels_last), and the convolution with g's padding, strides, dilation and groups. The convolution's
// math type is what its last user set: set it before every use.
struct ConvDescriptors : NonCopyable {
  explicit ConvDescriptors(const Conv2dGeometry& g);
  TensorDesc x, y, bias;
  FilterDesc w;
  ConvDesc conv;
};

// The calling thread's descriptors for g's shape (built on first use; shared, so that an entry dropped from the
// cache stays valid for whoever holds it). Throws ShapeError for sizes cuDNN's 32-bit legacy API cannot take.
std::shared_ptr<ConvDescriptors> conv_descriptors(const Conv2dGeometry& g);

}  // namespace cudnn
}  // namespace tandem
