// Convolution through cuDNN's legacy API: forward, backward data and backward filter, with the algorithm
// chosen once per shape (cudnnFind*AlgorithmEx) and cached.
#pragma once

#include "runtime/nn_backend.h"

namespace tandem {
namespace cudnn {

void conv2d_forward(const Conv2dGeometry& g, const void* x, const void* w, const void* bias, void* y,
                    const Stream& s);
void conv2d_backward_data(const Conv2dGeometry& g, const void* dy, const void* w, void* dx, const Stream& s);
void conv2d_backward_weight(const Conv2dGeometry& g, const void* x, const void* dy, void* dw, const Stream& s);

}  // namespace cudnn
}  // namespace tandem
