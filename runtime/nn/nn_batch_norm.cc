// batch_norm: checks, running-statistics update, dispatch to the NN backend, and its backward.
#include "runtime/base/error.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/nn/nn_memory_format.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/profiler.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

namespace {
using autograd::SavedTensor;

void* ptr_or_null(const Tensor& t) { return t.defined() ? t.raw_data() : nullptr; }

// The dtype of the parameters and statistics for input x: f32 for a bf16 input (precision.h), x's otherwise.
DType param_dtype(const Tensor& x) { return BatchNormGeometry{x.dtype()}.param_dtype(); }

// Checks a per-channel operand ([C], x's device, param_dtype) when it is given.
void check_channel_vector(const Tensor& t, const char* what, const Tensor& x) {
  if (!t.defined()) return;
  check_same_device({x, t}, "batch_norm");
  TD_CHECK_DTYPE(t.dtype() == param_dtype(x), "batch_norm: ", what, " is ", dtype_name(t.dtype()), " but an input of ",
                 dtype_name(x.dtype()), " takes ", dtype_name(param_dtype(x)));
  TD_CHECK_SHAPE(t.dim() == 1 && t.shape()[0] == x.shape()[1], "batch_norm: ", what, " must be [", x.shape()[1],
                 "] for an input of shape ", shape_str(x.shape()), ", got ", shape_str(t.shape()));
}
}  // namespace

namespace {

// Checks batch_norm's arguments and returns x's geometry.
BatchNormGeometry checked_geometry(const Tensor& x, const Tensor& weight, const Tensor& bias,
                                   const Tensor& running_mean, const Tensor& running_var, bool training, double eps) {
  TD_CHECK(x.defined(), "batch_norm: the input is undefined");
  check_float_or_bf16(x, "batch_norm");
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
  return g;
}

// What batch norm's backward keeps: the geometry, the saved tensors and the options of the forward call.
struct BackwardState {
  BatchNormGeometry g;
  SavedTensor x, weight, mean, stat, y;  // stat: invstd in training, running_var in evaluation; y when activated
  SavedTensor bias;                      // the forward's (may be null), with mask_from_x
  bool mask_from_x;  // activated in training without a residual: a backend may recompute y from x (nn_backend.h)
  bool training;
  double eps;
  bool fused;
  BnActivation act;
  bool has_residual;
};

// Whether the residual's gradient may be added into the pending buffer `t` by the kernel: dense in the kernels'
// layout, and not bf16 (the kernel would add its f32 gradient before rounding it, where the separate add adds
// the rounded one).
bool residual_buffer_fits(const Tensor& t, const BatchNormGeometry& g, const Tensor& x) {
  return t.defined() && g.dtype != DType::BF16 && t.dtype() == g.dtype && t.shape() == x.shape() &&
         (g.channels_last ? is_channels_last(t) : t.is_contiguous());
}

// The gradients of x, weight, bias (and the residual) from the output's; the residual's is added into its
// pending buffer in place (the kernel's accumulate_dresidual) when `into` offers one that fits.
std::vector<Tensor> batch_norm_backward(const BackwardState& st, std::vector<Tensor>& grads,
                                        const std::vector<bool>& need, autograd::InPlaceGrads& into) {
  const BatchNormGeometry& g = st.g;
  Tensor xv = st.x.unpack("batch_norm"), wv = st.weight.unpack("batch_norm"), mv = st.mean.unpack("batch_norm");
  Tensor is = st.stat.unpack("batch_norm");
  Tensor yv = st.y.defined() ? st.y.unpack("batch_norm_act") : Tensor();
  Tensor bv = st.bias.unpack("batch_norm_act");
  if (!st.training) is = rdiv(1.0, sqrt(add(is, st.eps)));
  Tensor gy = dense_in_format(grads[0], g.channels_last);
  TD_CHECK_DTYPE(gy.dtype() == g.dtype, "batch_norm backward: the output's gradient is ", dtype_name(gy.dtype()),
                 " but the output is ", dtype_name(g.dtype));
  TensorOptions opts = gy.options(), popts = opts.with_dtype(g.param_dtype());
  std::vector<Tensor> out(st.has_residual ? 4 : 3);
  if (need[0]) out[0] = empty_in_format(xv.shape(), opts, g.channels_last);
  if (need[1]) out[1] = empty({g.c}, popts);
  if (need[2]) out[2] = empty({g.c}, popts);
  const bool residual = st.has_residual && need[3];
  const bool in_place = residual && residual_buffer_fits(into.offered(3), g, xv);
  if (residual) out[3] = in_place ? into.offered(3) : empty_in_format(xv.shape(), opts, g.channels_last);
  BatchNormBackwardArgs a{g,
                          st.training,
                          xv.raw_data(),
                          gy.raw_data(),
                          ptr_or_null(wv),
                          mv.raw_data(),
                          is.raw_data(),
                          ptr_or_null(out[0]),
                          ptr_or_null(out[1]),
                          ptr_or_null(out[2])};
  NNBackend& nn = nn_backend_for(gy.device());
  if (st.fused)
    nn.batch_norm_act_backward({a, ptr_or_null(yv), st.act, in_place, residual ? ptr_or_null(out[3]) : nullptr,
                                ptr_or_null(bv), st.mask_from_x},
                               current_stream(gy.device()));
  else
    nn.batch_norm_backward(a, current_stream(gy.device()));
  if (in_place) {
    into.accumulated(3);
    out[3] = Tensor();
  }
  return out;
}

// batch_norm and batch_norm_act: act(batch_norm(x) + residual), through the plain kernels when there is nothing
// to fuse (act None, no residual). A bf16 input (and residual, and the gradients) go to the kernels as bf16 with
// f32 parameters and statistics (BatchNormGeometry::param_dtype); the kernels compute in f32 or wider and round
// each bf16 result once.
Tensor batch_norm_impl(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                       const Tensor& running_var, const Tensor& residual, BnActivation act, bool training,
                       double momentum, double eps) {
  const BatchNormGeometry g = checked_geometry(x, weight, bias, running_mean, running_var, training, eps);
  const bool fused = act != BnActivation::None || residual.defined();
  Tensor rd;
  if (residual.defined()) {
    check_same_device({x, residual}, "batch_norm_act");
    TD_CHECK_DTYPE(residual.dtype() == x.dtype(), "batch_norm_act: the residual is ", dtype_name(residual.dtype()),
                   " but the input is ", dtype_name(x.dtype()));
    TD_CHECK_SHAPE(residual.shape() == x.shape(), "batch_norm_act: the residual must have the input's shape ",
                   shape_str(x.shape()), ", got ", shape_str(residual.shape()));
    rd = dense_in_format(residual, g.channels_last);
  }

  Tensor xd = dense_in_format(x, g.channels_last);
  Tensor wd = weight.defined() ? weight.contiguous() : Tensor();
  Tensor bd = bias.defined() ? bias.contiguous() : Tensor();
  TensorOptions opts = x.options().with_dtype(g.param_dtype());
  Tensor y = empty_in_format(x.shape(), x.options(), g.channels_last);
  NNBackend& nn = nn_backend_for(x.device());
  Stream stream = current_stream(x.device());
  Tensor mean, invstd;  // the statistics backward uses (invstd computed there in evaluation)
  if (training) {
    // One allocation for both (a pool call less per batch norm: host time that counts at small images).
    Tensor stats = empty({2, g.c}, opts);
    mean = stats.select(0, 0);
    invstd = stats.select(0, 1);
    BatchNormTrainArgs a{g,
                         xd.raw_data(),
                         ptr_or_null(wd),
                         ptr_or_null(bd),
                         eps,
                         momentum,
                         running_mean.defined() ? running_mean.raw_data() : nullptr,
                         running_var.defined() ? running_var.raw_data() : nullptr,
                         y.raw_data(),
                         mean.raw_data(),
                         invstd.raw_data()};
    if (fused)
      nn.batch_norm_act_forward_train({a, ptr_or_null(rd), act}, stream);
    else
      nn.batch_norm_forward_train(a, stream);
    if (running_mean.defined()) {
      running_mean.storage().bump_version();
      running_var.storage().bump_version();
    }
  } else if (x.numel() > 0) {
    BatchNormEvalArgs a{
        g,   xd.raw_data(), ptr_or_null(wd), ptr_or_null(bd), running_mean.raw_data(), running_var.raw_data(),
        eps, y.raw_data()};
    if (fused)
      nn.batch_norm_act_forward_eval({a, ptr_or_null(rd), act}, stream);
    else
      nn.batch_norm_forward_eval(a, stream);
  }

  std::vector<Tensor> inputs{x, weight, bias};
  if (residual.defined()) inputs.push_back(residual);
  if (autograd::any_requires_grad(inputs)) {
    const bool mask_from_x = act != BnActivation::None && !residual.defined() && training;
    BackwardState st{g,
                     SavedTensor(xd),
                     SavedTensor(wd),
                     SavedTensor(training ? mean : running_mean),
                     SavedTensor(training ? invstd : running_var),
                     SavedTensor(fused && act != BnActivation::None ? y : Tensor()),
                     SavedTensor(mask_from_x ? bd : Tensor()),
                     mask_from_x,
                     training,
                     eps,
                     fused,
                     act,
                     residual.defined()};
    autograd::record_into(fused ? "batch_norm_act" : "batch_norm", inputs, {y},
                          [st](std::vector<Tensor>& grads, const std::vector<bool>& need,
                               autograd::InPlaceGrads& into) { return batch_norm_backward(st, grads, need, into); });
  }
  return y;
}

}  // namespace

Tensor batch_norm(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                  const Tensor& running_var, bool training, double momentum, double eps) {
  ProfileScope scope("batch_norm");
  return batch_norm_impl(x, weight, bias, running_mean, running_var, Tensor(), BnActivation::None, training, momentum,
                         eps);
}

Tensor batch_norm_act(const Tensor& x, const Tensor& weight, const Tensor& bias, const Tensor& running_mean,
                      const Tensor& running_var, const Tensor& residual, BnActivation act, bool training,
                      double momentum, double eps) {
  ProfileScope scope("batch_norm_act");
  return batch_norm_impl(x, weight, bias, running_mean, running_var, residual, act, training, momentum, eps);
}

}  // namespace tandem
