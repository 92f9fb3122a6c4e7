// Fused optimizer steps: sgd_step_ and adam_step_ check their tensor lists and hand them to one kernel call.
#include <string>

#include "runtime/base/error.h"
#include "runtime/nn/nn_backend.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/layout.h"
#include "runtime/tensor/profiler.h"
#include "runtime/tensor/tensor_desc.h"

namespace tandem {

namespace {
// The tensors of one optimizer call as the pointer arrays the kernels take (empty tensors left out).
struct TensorLists {
  std::vector<void*> lists[4];
  std::vector<int64_t> numels;
};

// Checks that every list has one tensor per parameter, each of the parameter's shape, device, dtype and dense
// layout; `names` label the lists in messages (the first is the parameters).
TensorLists gather(const char* op, const std::vector<const std::vector<Tensor>*>& lists,
                   const std::vector<const char*>& names) {
  const std::vector<Tensor>& params = *lists[0];
  TensorLists out;
  for (size_t l = 1; l < lists.size(); ++l)
    TD_CHECK(lists[l]->size() == params.size(), op, ": ", params.size(), " parameters but ", lists[l]->size(), " ",
             names[l]);
  for (size_t i = 0; i < params.size(); ++i) {
    const Tensor& p = params[i];
    TD_CHECK(p.defined(), op, ": parameter ", i, " is undefined");
    check_float(p, op);
    for (size_t l = 0; l < lists.size(); ++l) {
      const Tensor& t = (*lists[l])[i];
      TD_CHECK(t.defined(), op, ": ", names[l], " ", i, " is undefined");
      TD_CHECK_DEVICE(t.device() == params[0].device(), op, ": ", names[l], " ", i, " is on ", t.device(),
                      " but parameter 0 is on ", params[0].device(), "; all tensors of one call share a device");
      TD_CHECK_DTYPE(t.dtype() == params[0].dtype(), op, ": ", names[l], " ", i, " is ", dtype_name(t.dtype()),
                     " but parameter 0 is ", dtype_name(params[0].dtype()), "; all tensors of one call share a dtype");
      TD_CHECK_SHAPE(t.shape() == p.shape(), op, ": ", names[l], " ", i, " has shape ", shape_str(t.shape()),
                     " but its parameter has shape ", shape_str(p.shape()));
      // The kernels read every tensor as a flat array: each must be dense, in its parameter's layout.
      TD_CHECK(p.numel() == 0 || (is_dense(p) && same_layout(t, p)), op, ": ", names[l], " ", i,
               " is not dense in its parameter's layout (strides ", shape_str(t.strides()), ", parameter's ",
               shape_str(p.strides()), ")");
    }
    if (p.numel() == 0) continue;
    for (size_t l = 0; l < lists.size(); ++l) out.lists[l].push_back((*lists[l])[i].raw_data());
    out.numels.push_back(p.numel());
  }
  return out;
}

void bump_versions(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts) t.storage().bump_version();
}
}  // namespace

void sgd_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads,
               const std::vector<Tensor>& momentum_buffers, const SgdHyper& h) {
  ProfileScope scope("sgd_step");
  TD_CHECK(h.lr >= 0 && h.momentum >= 0 && h.weight_decay >= 0, "sgd_step_: lr, momentum and weight_decay must ",
           "be >= 0, got lr ", h.lr, ", momentum ", h.momentum, ", weight_decay ", h.weight_decay);
  TD_CHECK(!h.nesterov || (h.momentum > 0 && h.dampening == 0),
           "sgd_step_: Nesterov momentum needs momentum > 0 and dampening 0");
  const bool momentum = h.momentum != 0;
  std::vector<const std::vector<Tensor>*> lists{&params, &grads};
  std::vector<const char*> names{"parameter", "gradient"};
  if (momentum) {
    lists.push_back(&momentum_buffers);
    names.push_back("momentum buffer");
  }
  TensorLists tl = gather("sgd_step_", lists, names);
  if (tl.numels.empty()) return;
  Device device = params[0].device();
  TD_CHECK_DEVICE(h.device_lr == nullptr || device.is_cuda(), "sgd_step_: a device learning rate on ", device);
  nn_backend_for(device).sgd_step({params[0].dtype(), static_cast<int64_t>(tl.numels.size()), tl.lists[0].data(),
                                   tl.lists[1].data(), momentum ? tl.lists[2].data() : nullptr, tl.numels.data(), h},
                                  current_stream(device));
  bump_versions(params);
  if (momentum) bump_versions(momentum_buffers);
}

void adam_step_(const std::vector<Tensor>& params, const std::vector<Tensor>& grads, const std::vector<Tensor>& exp_avg,
                const std::vector<Tensor>& exp_avg_sq, const AdamHyper& h) {
  ProfileScope scope("adam_step");
  TD_CHECK(h.lr >= 0 && h.eps >= 0 && h.weight_decay >= 0, "adam_step_: lr, eps and weight_decay must be >= 0, ",
           "got lr ", h.lr, ", eps ", h.eps, ", weight_decay ", h.weight_decay);
  TD_CHECK(h.beta1 >= 0 && h.beta1 < 1 && h.beta2 >= 0 && h.beta2 < 1, "adam_step_: betas must be in [0, 1), got (",
           h.beta1, ", ", h.beta2, ")");
  TD_CHECK(h.step >= 1, "adam_step_: step counts from 1, got ", h.step);
  TensorLists tl = gather("adam_step_", {&params, &grads, &exp_avg, &exp_avg_sq},
                          {"parameter", "gradient", "exp_avg", "exp_avg_sq"});
  if (tl.numels.empty()) return;
  Device device = params[0].device();
  TD_CHECK_DEVICE(h.device_coefs == nullptr || device.is_cuda(), "adam_step_: device coefficients on ", device);
  nn_backend_for(device).adam_step({params[0].dtype(), static_cast<int64_t>(tl.numels.size()), tl.lists[0].data(),
                                    tl.lists[1].data(), tl.lists[2].data(), tl.lists[3].data(), tl.numels.data(), h},
                                   current_stream(device));
  bump_versions(params);
  bump_versions(exp_avg);
  bump_versions(exp_avg_sq);
}

}  // namespace tandem
