// Loss functions.
#include "models/losses.h"

#include "runtime/base/error.h"
#include "runtime/tensor/ops.h"

namespace tandem {
namespace models {

namespace {
void check_logits(const Tensor& logits, const char* who) {
  TD_CHECK_SHAPE(logits.dim() == 2 && logits.size(0) > 0 && logits.size(1) > 0, who,
                 " expects logits [N, C] with N, C > 0, got ", shape_str(logits.shape()));
}
}  // namespace

Tensor mse_loss(const Tensor& input, const Tensor& target) {
  TD_CHECK_SHAPE(input.shape() == target.shape(), "mse_loss: input ", shape_str(input.shape()), " and target ",
                 shape_str(target.shape()), " differ in shape");
  TD_CHECK_SHAPE(input.numel() > 0, "mse_loss of empty tensors");
  Tensor d = sub(input, target);
  return mean(mul(d, d));
}

Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing) {
  check_logits(logits, "cross_entropy");
  TD_CHECK(label_smoothing >= 0 && label_smoothing <= 1, "cross_entropy: label_smoothing must be in [0, 1], got ",
           label_smoothing);
  TD_CHECK_DTYPE(labels.dtype() == DType::I64, "cross_entropy: labels must be i64, got ", dtype_name(labels.dtype()));
  TD_CHECK_SHAPE(labels.dim() == 1 && labels.size(0) == logits.size(0), "cross_entropy: labels must be [",
                 logits.size(0), "] for logits ", shape_str(logits.shape()), ", got ", shape_str(labels.shape()));
  const int64_t classes = logits.size(1);
  if (labels.device().is_cpu()) {
    const int64_t* l = labels.contiguous().data<int64_t>();
    for (int64_t i = 0; i < labels.numel(); ++i)
      TD_CHECK_INDEX(l[i] >= 0 && l[i] < classes, "cross_entropy: label ", l[i], " at position ", i,
                     " is out of range for ", classes, " classes");
  }
  // On CUDA, one_hot flags a label out of range in the device error flag (no synchronization here).
  Tensor logp = log_softmax(logits, 1);
  Tensor picked = sum(mul(one_hot(labels, classes, logits.dtype()), logp));
  Tensor nll = div(neg(picked), static_cast<double>(logits.size(0)));
  if (label_smoothing == 0) return nll;
  Tensor smooth = neg(mean(logp));
  return add(mul(nll, 1.0 - label_smoothing), mul(smooth, label_smoothing));
}

Tensor soft_cross_entropy(const Tensor& student_logits, const Tensor& teacher_logits, double temperature) {
  check_logits(student_logits, "soft_cross_entropy");
  TD_CHECK_SHAPE(student_logits.shape() == teacher_logits.shape(), "soft_cross_entropy: student logits ",
                 shape_str(student_logits.shape()), " and teacher logits ", shape_str(teacher_logits.shape()),
                 " differ in shape");
  TD_CHECK(temperature > 0, "soft_cross_entropy: temperature must be positive, got ", temperature);
  const double inv_t = 1.0 / temperature;
  Tensor q = softmax(temperature == 1 ? teacher_logits.detach() : mul(teacher_logits.detach(), inv_t), 1);
  Tensor logp = log_softmax(temperature == 1 ? student_logits : mul(student_logits, inv_t), 1);
  double scale = -temperature * temperature / static_cast<double>(student_logits.size(0));
  return mul(sum(mul(q, logp)), scale);
}

Tensor kl_div(const Tensor& log_input, const Tensor& target) {
  TD_CHECK_SHAPE(log_input.shape() == target.shape(), "kl_div: input ", shape_str(log_input.shape()), " and target ",
                 shape_str(target.shape()), " differ in shape");
  TD_CHECK_SHAPE(log_input.dim() >= 1 && log_input.size(0) > 0, "kl_div needs a batch dim, got ",
                 shape_str(log_input.shape()));
  // log(target) where target > 0, else log(1) = 0, so that 0 * log(0) contributes 0 (and no NaN).
  Tensor zero = zeros({}, target.options());
  Tensor one = ones({}, target.options());
  Tensor safe = where(gt(target, zero), target, one);
  Tensor terms = mul(target, sub(log(safe), log_input));
  return div(sum(terms), static_cast<double>(log_input.size(0)));
}

}  // namespace models
}  // namespace tandem
