// Hyperparameters every strategy shares: batch, epochs, per-block optimizer and learning-rate schedule,
// teacher BatchNorm mode, data order and augmentation.
#pragma once

#include <cstdint>
#include <string>

#include "parallel/bd/workload.h"
#include "runtime/optim/optim.h"

namespace tandem {
namespace parallel {
namespace bd {

struct TrainOptions {
  int64_t batch = 256;          // global batch B (every strategy's step covers the same B rows)
  int64_t epochs = 1;           // epochs per block
  int64_t stop_after = 0;       // stop after this many epochs of this run (0: run to `epochs`); resume later
  int64_t steps_per_epoch = 0;  // 0: every full batch of the data; else at most this many
  // Each student block gets its own optimizer of this kind (and its own state): optim::make_optimizer.
  optim::OptimizerSpec optimizer = {"sgd", /*lr=*/0.025, /*momentum=*/0.9, /*nesterov=*/true, /*weight_decay=*/4e-5};
  std::string lr_schedule = "cosine";  // optim::parse_lr_schedule spec, stepped once per optimizer step
  TeacherBn teacher_bn = TeacherBn::Eval;
  uint64_t data_seed = 0;        // shuffling and augmentation
  std::string augment = "none";  // data::Pipeline spec
  int loader_threads = 1;        // per worker that loads data (0: in the worker's own thread)
  // CUDA workers replay each teacher forward and student step from a CUDA graph (compute_graphs.h).
  bool cuda_graph = false;
};

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
