// Running every shape of a worker's blocks once on copies before anything is timed.
#include "parallel/bd/warmup.h"

#include <algorithm>

#include "models/losses.h"
#include "models/zoo/supernet.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"

namespace tandem {
namespace parallel {
namespace bd {

Tensor block_loss(int block, int blocks, const Tensor& out, const Tensor& target) {
  return block + 1 == blocks ? models::soft_cross_entropy(out, target) : models::mse_loss(out, target);
}

void for_each_path(models::Module& student, const std::function<void()>& step) {
  const std::vector<models::SupernetCell*> cells = models::supernet_cells(student);
  size_t paths = 1;
  for (models::SupernetCell* c : cells) paths = std::max(paths, c->num_candidates());
  for (size_t p = 0; p < paths; ++p) {
    for (models::SupernetCell* c : cells) c->fix_path(std::min(p, c->num_candidates() - 1));
    step();
  }
  for (models::SupernetCell* c : cells) c->fix_path(std::nullopt);
}

void warm_up_blocks(const Workload& w, const TrainOptions& train, const std::map<int, BlockWork>& work, Device device) {
  if (work.empty()) return;
  std::vector<int> blocks;
  for (const auto& [b, todo] : work)
    if (!todo.student_rows.empty()) blocks.push_back(b);
  std::vector<models::ModulePtr> teacher = w.make_teacher_blocks(train.teacher_bn);
  std::vector<models::ModulePtr> students = w.make_students(blocks);
  Generator gen(0x5eed);
  const TensorOptions on_device = TensorOptions().with_device(device);
  auto teacher_forward = [&](int b, const Tensor& x) {
    autograd::NoGradGuard no_grad;
    return teacher[b]->forward(x);
  };
  for (const auto& [b, todo] : work) {
    for (int64_t rows : todo.teacher_rows) teacher_forward(b, randn(w.activation_shape(b, rows), gen, on_device));
    if (todo.student_rows.empty()) continue;
    models::Module& student =
        *students[static_cast<size_t>(std::find(blocks.begin(), blocks.end(), b) - blocks.begin())];
    auto opt = optim::make_optimizer(train.optimizer, student.named_parameters(models::ParamKind::Weight));
    for (int64_t rows : todo.student_rows) {
      const Tensor x = randn(w.activation_shape(b, rows), gen, on_device);
      const Tensor target = teacher_forward(b, x);
      for_each_path(student, [&] {
        student.zero_grad();
        block_loss(b, w.blocks(), student.forward(x), target).backward();
        opt->step();
      });
    }
  }
}

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
