// Pipe-BD from the cost model, for workers that are modelled GPUs (or SM partitions of one): the block profile
// of the AHD planner and the simulator (parallel/bd/plan.h) built from costs the model predicts instead of
// measured ones, and Pipe-BD runs as calibration points.
//
// Each block's teacher forward and student step (forward, loss, backward, optimizer step) are recorded on the
// simulated GPU at 2 and 4 rows (dry), extrapolated to B/g rows and timed on the modelled worker, with the
// host's time to launch their ops (host_op_s each); each block's gradient all-reduce over g workers (a ring)
// and each boundary's relay of B rows go at the modelled link;
// memory is the simulated allocator's peak at 2 and 4 rows, extrapolated (the student's parameters,
// gradients, optimizer state and activations, the teacher block's parameters, its input and output, as
// profile_blocks counts them). Data loading is not modelled (load_s stays empty).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/bd/plan.h"
#include "parallel/bd/train_options.h"
#include "parallel/bd/workload.h"
#include "tools/costmodel/calibration.h"

namespace tandem {
namespace costmodel {

// The paper's workloads as bd_bench runs them: "nas" (MobileNetV2 teacher, MBConv supernet student with
// `cells` cells a block) or "compression" (ResNet-18 teacher, depthwise-separable student), CIFAR-10 variants
// for inputs up to 64 pixels, ImageNet ones above; teachers may be given instead.
parallel::bd::WorkloadSpec paper_workload(const std::string& name, int64_t input, int64_t cells = 2,
                                          const std::string& teacher = "");

// What the simulated GPU recorded of each block at 2 and 4 rows.
struct BlockRecords {
  static constexpr int64_t kRows[2] = {2, 4};
  struct Block {
    std::vector<OpCounts> teacher[2], student[2];
    double memory[2] = {0, 0};
    double gradient_bytes = 0;  // what the block's all-reduce moves (f32 weights)
  };
  std::vector<Block> blocks;
  std::vector<int64_t> row_bytes;  // Workload::row_bytes()
  Json to_json() const;
  static BlockRecords from_json(const Json& j);
};

BlockRecords record_blocks(const parallel::bd::Workload& w, const parallel::bd::TrainOptions& train);

// The profile for replication factors 1..max_g at global batch `batch` on `worker` (link: its
// nvlink_bytes_per_s at the constants' link efficiency).
parallel::bd::BlockProfile block_profile(const BlockRecords& r, int64_t batch, int max_g, const GpuSpec& worker,
                                         const Constants& c);

// block_profile of fresh records.
parallel::bd::BlockProfile model_block_profile(const parallel::bd::Workload& w, const parallel::bd::TrainOptions& train,
                                               int max_g, const GpuSpec& worker, const Constants& c);

// A Pipe-BD run's calibration points: the seconds per epoch of m's strategy, simulated from the records (the
// points of one run share them). record_pipe_bd_point records them; read_pipe_bd_point reads stored ones.
std::shared_ptr<const PointModel> record_pipe_bd_point(const Measurement& m);
std::shared_ptr<const PointModel> read_pipe_bd_point(const Measurement& m, const Json& j);

}  // namespace costmodel
}  // namespace tandem
