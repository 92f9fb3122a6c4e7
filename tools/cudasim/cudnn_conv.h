// The simulated cuDNN's arithmetic: 2-d convolution forward, backward data and backward filter, and the
// broadcast tensor add, on strided float, double or bfloat16 tensors, computed on the CPU with double
// accumulation (bf16 results rounded through float, as from the hardware's f32 accumulators).
// cudnn.cc checks the arguments and queues these on the handle's stream.
#pragma once

#include <cstddef>
#include <cstdint>

namespace cudasim {
namespace cudnn {

// A 4-d tensor or filter: sizes (n, c, h, w), or (k, c, r, s) for a filter, and strides in elements.
struct Dims {
  int n = 0, c = 0, h = 0, w = 0;
  int64_t sn = 0, sc = 0, sh = 0, sw = 0;
};

// Bytes from the first element to the end of the last (what a kernel touches).
size_t extent_bytes(const Dims& d, size_t element_bytes);

// One convolution: input x, filter w (x.c / groups input channels per filter), output y.
struct Conv {
  Dims x, w, y;
  int groups = 1;
  int pad_h = 0, pad_w = 0, stride_h = 1, stride_w = 1, dil_h = 1, dil_w = 1;
  bool flip = false;  // CUDNN_CONVOLUTION: the filter is applied rotated by 180 degrees
  bool f64 = false;   // double data
  bool bf16 = false;  // bfloat16 data with float accumulation (PSEUDO_BFLOAT16_CONFIG); float when neither
};

// How an algorithm sums. tf32: float inputs are rounded to TF32 before they are multiplied. unordered: the
// reduction is split into chunks whose partial sums, rounded to the data type, are added in an order drawn
// at random per output element (what atomic adds of a non-deterministic algorithm do); else every output is
// one double sum in a fixed order, rounded once.
struct Numerics {
  bool tf32 = false;
  bool unordered = false;
};

// Each computes out = alpha * result + beta * out; beta == 0 does not read out.
void forward(const Conv& c, const Numerics& m, double alpha, const void* x, const void* w, double beta, void* y);
void backward_data(const Conv& c, const Numerics& m, double alpha, const void* w, const void* dy, double beta,
                   void* dx);
void backward_filter(const Conv& c, const Numerics& m, double alpha, const void* x, const void* dy, double beta,
                     void* dw);

// C = alpha * A + beta * C, where each size of A is C's or 1 (broadcast), float or double.
void add_tensor(bool f64, double alpha, const Dims& a, const void* A, double beta, const Dims& c, void* C);

}  // namespace cudnn
}  // namespace cudasim
