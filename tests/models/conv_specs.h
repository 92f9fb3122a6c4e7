// A convolution spec with every field given, for the model tests (models' conv_spec derives padding and bias).
#pragma once

#include <cstdint>

#include "models/layers.h"

namespace tandem {
namespace models {

inline Conv2dSpec conv_spec_of(int64_t in, int64_t out, int64_t k, int64_t stride, int64_t pad, int64_t dil,
                               int64_t groups, bool bias) {
  Conv2dSpec s;
  s.in_channels = in;
  s.out_channels = out;
  s.kernel = k;
  s.stride = stride;
  s.padding = pad;
  s.dilation = dil;
  s.groups = groups;
  s.bias = bias;
  return s;
}

}  // namespace models
}  // namespace tandem
