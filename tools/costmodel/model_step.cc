// models_bench's unit of work for a zoo model.
#include "tools/costmodel/model_step.h"

#include <vector>

#include "models/losses.h"
#include "models/registry.h"
#include "runtime/base/error.h"
#include "runtime/memory/stream.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"

namespace tandem {
namespace costmodel {

ModelStep::ModelStep(const std::string& model, const std::string& mode, Device device, bool channels_last)
    : mode_(mode), device_(device), channels_last_(device.is_cuda() && channels_last) {
  TD_CHECK(mode == "fwd" || mode == "fwd_bwd" || mode == "step", "mode must be fwd, fwd_bwd or step, got '", mode, "'");
  DeviceGuard guard(device);
  models::ModelOptions o;
  o.seed = 1;
  model_ = models::make_model(model, o);
  model_->to(device);
  if (channels_last_) model_->to_channels_last();
  model_->train(mode != "fwd");
  optim::SgdOptions so;
  so.lr = 0.01;
  so.momentum = 0.9;
  so.weight_decay = 5e-4;
  optimizer_ = std::make_unique<optim::Sgd>(optim::single_group(model_->named_parameters()), so);
}

void ModelStep::set_inputs(int64_t batch, int64_t size) {
  DeviceGuard guard(device_);
  Generator gen(2);
  images_ = randn({batch, 3, size, size}, gen).to(device_);
  if (channels_last_) images_ = to_channels_last(images_);
  std::vector<int64_t> labels(static_cast<size_t>(batch));
  for (auto& l : labels) l = static_cast<int64_t>(gen.integer(1000));
  labels_ = from_vector<int64_t>(labels, {batch}).to(device_);
}

void ModelStep::run(bool in_place) {
  DeviceGuard guard(device_);
  if (mode_ == "fwd") {
    autograd::NoGradGuard ng;
    model_->forward(images_);
    return;
  }
  if (in_place)
    optimizer_->zero_grad(false);
  else
    model_->zero_grad();
  models::cross_entropy(model_->forward(images_), labels_).backward();
  if (mode_ == "step") optimizer_->step();
}

}  // namespace costmodel
}  // namespace tandem
