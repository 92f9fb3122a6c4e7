// batch_norm: checks, running-statistics update, dispatch to the NN backend, and its backward.
#include "runtime/base/error.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/nn/nn_memory_format.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

namespace {
using autograd::SavedTensor;

void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// Checks a per-channel operand ([C], x's device and dtype) when it is given.
void check_channel_vector(const Tensor& t, const char* what, const Tensor& x) {
  if (!t.defined()) return;
  check_same_device({x, t}, "batch_norm");
  TD_CHECK_DTYPE(t.dtype() == x.dtype(), "batch_norm: ", what, " is ", dtype_name(t.dtype()), " but the input is ",
                 dtype_name(x.dtype()));
  TD_CHECK_SHAPE(t.dim() == 1 && t.shape()[0] == x.shape()[1], "batch_norm: ", what, " must be [", x.shape()[1],
                 "] for an input of shape ", shape_str(x.shape()), ", got ", shape_str(t.shape()));
}
}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  TD_CHECK(x.defined(), "batch_norm: the input is undefined");
  check_float(x, "batch_norm");
  TD_CHECK_SHAPE(x.dim() == 4 || x.dim() == 2, "batch_norm needs a [N, C, H, W] or [N, C] input, got ",
                 shape_str(x.shape()));
  check_channel_vector(weight, "weight", x);
  check_channel_vector(bias, "bias", x);
  check_channel_vector(running_mean, "running_mean", x);
  check_channel_vector(running_var, "running_var", x);
  TD_CHECK(running_mean.defined() == running_var.defined(),
           "batch_norm: running_mean and running_var must be given together");
  TD_CHECK(training || running_mean.defined(), "batch_norm in evaluation mode needs running statistics");
  TD_CHECK(eps > 0, "batch_norm: eps must be positive, got ", eps);
  if (running_mean.defined())
    TD_CHECK(running_mean.is_contiguous() && running_var.is_contiguous(),
             "batch_norm: running statistics must be contiguous (they are updated in place)");

  BatchNormGeometry g;
  g.dtype = x.dtype();
  g.channels_last = suggests_channels_last(x);
  g.n = x.shape()[0];
  g.c = x.shape()[1];
  g.hw = x.dim() == 4 ? x.shape()[2] * x.shape()[3] : 1;
  TD_CHECK_SHAPE(!training || g.n * g.hw > 1, "batch_norm in training needs more than one value per channel, got ",
                 "an input of shape ", shape_str(x.shape()));

  Tensor xd = dense_in_format(x, g.channels_last);
  Tensor wd = weight.defined() ? weight.contiguous() : Tensor();
  Tensor bd = bias.defined() ? bias.contiguous() : Tensor();
  TensorOptions opts = x.options();
  Tensor y = empty_in_format(x.shape(), opts, g.channels_last);
  NNBackend& nn = nn_backend_for(x.device());
  Stream stream = current_stream(x.device());
  Tensor mean, invstd;  // the statistics backward uses (invstd computed there in evaluation)
  if (training) {
    // One allocation for both (a pool call less per batch norm: host time that counts at small images).
    Tensor stats = empty({2, g.c}, opts);
    mean = stats.select(0, 0);
    invstd = stats.select(0, 1);
    nn.batch_norm_forward_train(
        {g, xd.raw_data(), ptr_or_null(wd), ptr_or_null(bd), eps, momentum,
         running_mean.defined() ? running_mean.raw_data() : nullptr,
         running_var.defined() ? running_var.raw_data() : nullptr, y.raw_data(), mean.raw_data(), invstd.raw_data()},
        stream);
    if (running_mean.defined()) {
      running_mean.storage().bump_version();
      running_var.storage().bump_version();
    }
  } else if (x.numel() > 0) {
    nn.batch_norm_forward_eval({g, xd.raw_data(), ptr_or_null(wd), ptr_or_null(bd), running_mean.raw_data(),
                                running_var.raw_data(), eps, y.raw_data()},
                               stream);
  }

  std::vector<Tensor> inputs{x, weight, bias};
  if (autograd::any_requires_grad(inputs)) {
    SavedTensor sx(xd), sw(wd), smean(training ? mean : running_mean), sstat(training ? invstd : running_var);
    autograd::record(
        "batch_norm", inputs, {y},
        [g, sx, sw, smean, sstat, training, eps](std::vector<Tensor>& grads, const std::vector<bool>& need) {
          Tensor xv = sx.unpack("batch_norm"), wv = sw.unpack("batch_norm"), mv = smean.unpack("batch_norm");
          Tensor is = sstat.unpack("batch_norm");
          if (!training) is = rdiv(1.0, sqrt(add(is, eps)));
          Tensor gy = dense_in_format(grads[0], g.channels_last);
          TensorOptions opts = gy.options();
          std::vector<Tensor> out(3);
          if (need[0]) out[0] = empty_in_format(xv.shape(), opts, g.channels_last);
          if (need[1]) out[1] = empty({g.c}, opts);
          if (need[2]) out[2] = empty({g.c}, opts);
          nn_backend_for(gy.device())
              .batch_norm_backward({g, training, xv.raw_data(), gy.raw_data(), ptr_or_null(wv), mv.raw_data(),
                                    is.raw_data(), ptr_or_null(out[0]), ptr_or_null(out[1]), ptr_or_null(out[2])},
                                   current_stream(gy.device()));
          return out;
        });
  }
  return y;
}

}  // namespace tandem
