// Warm-up: every shape a worker will time, run once untimed beforehand, so that the profile and the timed runs leave
// out first-call costs (on a GPU: cuDNN's algorithm search per convolution shape and pass, which made the first
// profile on an H200 29 times the real step). The work runs on fresh copies of the blocks, so that nothing a run
// computes changes: no parameter, statistic, optimizer state, path sampler or loader of the caller's is touched.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <vector>

#include "models/module.h"
#include "parallel/bd/train_options.h"
#include "parallel/bd/workload.h"

namespace tandem {
namespace parallel {
namespace bd {

// Student block `block`'s loss against its teacher's output `target`: MSE, or soft-target cross-entropy on the
// logits of the last of `blocks` blocks.
Tensor block_loss(int block, int blocks, const Tensor& out, const Tensor& target);

// Runs `step` once along each path of the supernet cells in `student` (the i-th run with every cell fixed to its
// i-th candidate, or to its last where it has fewer), so that every candidate of every cell runs; then the cells
// sample again. Once for a student without supernet cells.
void for_each_path(models::Module& student, const std::function<void()>& step);

// What one worker runs of each block: the teacher block's forward at each of `teacher_rows`, the student block's
// forward, backward and optimizer step at each of `student_rows`.
struct BlockWork {
  std::vector<int64_t> teacher_rows, student_rows;
};

// Runs `work` (block -> its work) once on fresh copies of the workload's blocks on `device` (inputs drawn from a
// generator of its own; a student's target from its teacher block), along every path of each student.
void warm_up_blocks(const Workload& w, const TrainOptions& train, const std::map<int, BlockWork>& work, Device device);

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
