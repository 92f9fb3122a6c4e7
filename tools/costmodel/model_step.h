// One unit of models_bench's work for a zoo model, which the cost model also records: fwd (eval forward, no
// autograd), fwd_bwd (training forward, cross-entropy, backward) or step (fwd_bwd and an SGD step: momentum
// 0.9, weight decay 5e-4), on one device, for random inputs of a batch and size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>

#include "models/zoo/network.h"
#include "runtime/optim/optim.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace costmodel {

class ModelStep {
 public:
  // A zoo model (registry spec, weights seeded) on `device`, in the mode's training or eval state, its 4-D
  // weights channels-last when its inputs will be (on a GPU). ValueError for a mode other than fwd, fwd_bwd or
  // step.
  ModelStep(const std::string& model, const std::string& mode, Device device, bool channels_last);
  // Inputs of `batch` images of size x size (in the model's layout) and their labels.
  void set_inputs(int64_t batch, int64_t size);
  // Queues one unit of work on the device's current stream. in_place: gradients are zeroed in place rather than
  // dropped, so that a CUDA graph of run() replays into the same buffers (models_bench --cuda-graph).
  void run(bool in_place = false);
  Device device() const { return device_; }

 private:
  std::shared_ptr<models::Network> model_;
  std::unique_ptr<optim::Sgd> optimizer_;
  std::string mode_;
  Device device_;
  bool channels_last_;
  Tensor images_, labels_;
};

}  // namespace costmodel
}  // namespace tandem
