// Losses, composed from the op front end so that autograd differentiates them: MSE, cross-entropy with
// integer labels (and label smoothing), soft-target cross-entropy for distillation, and KL divergence.
#pragma once

#include "runtime/tensor/tensor.h"

namespace tandem {
namespace models {

// mean((input - target)^2) over all elements; the shapes must be equal (no broadcasting).
Tensor mse_loss(const Tensor& input, const Tensor& target);

// PyTorch's F.cross_entropy(logits [N, C], labels [N] i64, label_smoothing=eps), mean over N:
//   (1 - eps) * mean_n(-log p[n, y_n]) + eps * mean_n(mean_c(-log p[n, c])).
// A label outside [0, C) throws IndexError: at once, naming the label, for labels on the CPU; for labels on a
// CUDA device the kernel flags it and the IndexError comes at the next synchronization (e.g. loss.item()),
// so that the loss needs no host round trip.
Tensor cross_entropy(const Tensor& logits, const Tensor& labels, double label_smoothing = 0.0);

// Soft-target cross-entropy of Pipe-BD's last block: with q = softmax(teacher_logits / T) (no gradient to the
// teacher),
//   T^2 * mean_n(sum_c -q[n, c] * log_softmax(student_logits / T)[n, c]).
// At T = 1 this is exactly PyTorch's nn.CrossEntropyLoss()(student_logits, softmax(teacher_logits)), which
// Pipe-BD uses; the T^2 factor (Hinton et al.) keeps gradient magnitudes comparable across temperatures.
Tensor soft_cross_entropy(const Tensor& student_logits, const Tensor& teacher_logits, double temperature = 1.0);

// PyTorch's F.kl_div(log_input, target, reduction="batchmean"): sum(target * (log(target) - log_input)) / N,
// with 0 * log(0) taken as 0. log_input holds log-probabilities, target probabilities (same shape, N = dim 0).
Tensor kl_div(const Tensor& log_input, const Tensor& target);

}  // namespace models
}  // namespace tandem
