// matmul (one GEMM call per product, transposed views passed as transpose flags) and linear.
#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

namespace {
using autograd::SavedTensor;

// A matrix operand of a GEMM: the last two dims of `t`, row-major or transposed in memory.
struct GemmOperand {
  Tensor t;  // the tensor whose memory is read
  bool trans = false;
  int64_t ld = 0;
  int64_t batch_stride = 0;
};

// Whether the last two dims of x are row-major in memory, or else column-major (a transposed view).
bool row_major(const Tensor& x) {
  int64_t n = x.dim();
  return x.strides()[n - 1] == 1 && x.strides()[n - 2] >= std::max<int64_t>(x.shape()[n - 1], 1);
}
bool column_major(const Tensor& x) {
  int64_t n = x.dim();
  return !row_major(x) && x.strides()[n - 2] == 1 && x.strides()[n - 1] >= std::max<int64_t>(x.shape()[n - 2], 1);
}

GemmOperand operand(const Tensor& x) {
  int64_t n = x.dim();
  GemmOperand op;
  op.t = x;
  if (row_major(x)) {
    op.ld = x.strides()[n - 2];
  } else if (column_major(x)) {
    op.trans = true;
    op.ld = x.strides()[n - 1];
  } else {
    op.t = x.contiguous();
    op.ld = x.shape()[n - 1];
  }
  op.batch_stride = n == 3 ? op.t.strides()[0] : 0;
  return op;
}

// out[b] = a[b] @ b[b] for 2-D or 3-D (batched) operands.
Tensor gemm_forward(const Tensor& a, const Tensor& b) {
  bool batched = a.dim() == 3;
  int64_t m = a.shape()[a.dim() - 2], k = a.shape()[a.dim() - 1], n = b.shape()[b.dim() - 1];
  int64_t batch = batched ? a.shape()[0] : 1;
  Shape out_shape = batched ? Shape{batch, m, n} : Shape{m, n};
  Tensor out = empty(out_shape, a.options());
  if (out.numel() == 0) return out;
  if (k == 0) return out.fill_(0.0);
  GemmOperand A = operand(a), B = operand(b);
  backend_of(a).gemm({a.dtype(), A.trans, B.trans, m, n, k, 1.0, A.t.raw_data(), A.ld, A.batch_stride, B.t.raw_data(),
                      B.ld, B.batch_stride, 0.0, out.raw_data(), n, m * n, batch},
                     current_stream(a.device()));
  return out;
}
}  // namespace

Tensor matmul(const Tensor& a, const Tensor& b) {
  check_same_device({a, b}, "matmul");
  check_same_dtype({a, b}, "matmul");
  check_float(a, "matmul");
  TD_CHECK_SHAPE(a.dim() >= 2 && b.dim() >= 2, "matmul needs operands with at least 2 dims, got ", shape_str(a.shape()),
                 " and ", shape_str(b.shape()));
  TD_CHECK_SHAPE(a.shape().back() == b.shape()[b.dim() - 2], "matmul: inner dimensions differ: ", shape_str(a.shape()),
                 " @ ", shape_str(b.shape()));
  if (b.dim() == 2 && a.dim() > 2) {
    // [..., m, k] @ [k, n]: one GEMM over the flattened leading dims.
    Shape out_shape = a.shape();
    out_shape.back() = b.shape()[1];
    return matmul(a.reshape({-1, a.shape().back()}), b).view(out_shape);
  }
  TD_CHECK_SHAPE(a.dim() == b.dim() && a.dim() <= 3, "matmul supports [m,k]@[k,n], [...,m,k]@[k,n] and ",
                 "[b,m,k]@[b,k,n]; got ", shape_str(a.shape()), " @ ", shape_str(b.shape()));
  TD_CHECK_SHAPE(a.dim() == 2 || a.shape()[0] == b.shape()[0], "matmul: batch sizes differ: ", shape_str(a.shape()),
                 " @ ", shape_str(b.shape()));
  Tensor y = gemm_forward(a, b);
  if (autograd::any_requires_grad({a, b})) {
    SavedTensor sa(b.requires_grad() ? a : Tensor()), sb(a.requires_grad() ? b : Tensor());
    // Each gradient in its operand's layout: a transposed operand (a linear layer's weight.t()) gets the
    // transpose of a row-major product, g^T a for b as PyTorch computes a weight gradient, so that no copy
    // turns it into the weight's layout afterwards.
    const bool a_trans = column_major(a), b_trans = column_major(b);
    autograd::record(
        "matmul", {a, b}, {y}, [sa, sb, a_trans, b_trans](std::vector<Tensor>& g, const std::vector<bool>& need) {
          Tensor ga, gb, gt = g[0].transpose(-1, -2);
          if (need[0]) {
            Tensor bv = sb.unpack("matmul");
            ga = a_trans ? gemm_forward(bv, gt).transpose(-1, -2) : gemm_forward(g[0], bv.transpose(-1, -2));
          }
          if (need[1]) {
            Tensor av = sa.unpack("matmul");
            gb = b_trans ? gemm_forward(gt, av).transpose(-1, -2) : gemm_forward(av.transpose(-1, -2), g[0]);
          }
          return std::vector<Tensor>{ga, gb};
        });
  }
  return y;
}

Tensor linear(const Tensor& x, const Tensor& weight, const Tensor& bias) {
  TD_CHECK_SHAPE(weight.dim() == 2, "linear: weight must be [out, in], got ", shape_str(weight.shape()));
  TD_CHECK_SHAPE(x.dim() >= 1 && x.shape().back() == weight.shape()[1], "linear: input ", shape_str(x.shape()),
                 " does not end in the weight's in_features ", weight.shape()[1]);
  Tensor y = matmul(x.dim() == 1 ? x.unsqueeze(0) : x, weight.t());
  if (x.dim() == 1) y = y.squeeze(0);
  if (bias.defined()) {
    TD_CHECK_SHAPE(bias.dim() == 1 && bias.shape()[0] == weight.shape()[0], "linear: bias must be [", weight.shape()[0],
                   "], got ", shape_str(bias.shape()));
    y = add(y, bias);
  }
  return y;
}

}  // namespace tandem
