// A distillation workload: the teacher (registry spec and weights), the student blocks (supernet cells,
// depthwise-separable copies, or another registry model cut into as many blocks), and the input size.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/module.h"
#include "models/zoo/network.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace parallel {
namespace bd {

// How the frozen teacher's BatchNorm layers normalize. Eval (the default) uses the running statistics, so a
// teacher activation depends on its own row only, whatever the batch split. Train normalizes with batch
// statistics (as Pipe-BD's and DNA's code do) and updates the running statistics; targets then depend on
// which rows share a batch (DP shards, AHD replicas). Dropout stays off in both.
enum class TeacherBn { Eval, Train };
TeacherBn parse_teacher_bn(const std::string& s);  // "eval" | "train"
const char* teacher_bn_name(TeacherBn m);

struct WorkloadSpec {
  std::string teacher;          // registry spec, e.g. "mobilenet_v2:cifar,width_mult=0.5,classes=10"
  std::string teacher_weights;  // safetensors checkpoint ("": the spec's seeded initialization)
  // "supernet" (MBConv supernet cells), "separable" (the teacher with depthwise-separable convolutions),
  // or a registry spec whose default block partition gives as many blocks as the teacher's.
  std::string student = "supernet";
  int64_t supernet_cells = 2;  // cells per supernet block (at least those the stride needs)
  uint64_t student_seed = 0;   // initialization and path sampling
  Shape sample;                // [C, H, W] of one input
};

class Workload {
 public:
  // Builds the teacher and the students once to check them: an unknown model, teacher weights that do not
  // fit, an input the teacher rejects, or a student whose block count or block shapes differ from the
  // teacher's throw ValueError / ShapeError / IoError saying which.
  explicit Workload(WorkloadSpec spec);

  const WorkloadSpec& spec() const { return spec_; }
  int blocks() const { return static_cast<int>(shapes_.size()); }
  // The activation entering block j for `rows` rows (j = blocks(): the last block's output).
  Shape activation_shape(int j, int64_t rows) const;
  // Bytes of one row of each activation_shape, blocks() + 1 entries: the data in f32, the teacher blocks' outputs
  // in the calling thread's activation dtype (runtime/tensor/precision.h).
  std::vector<int64_t> row_bytes() const;
  int64_t num_classes() const { return num_classes_; }

  // The blocks of a new teacher with its weights loaded and its BatchNorm mode set (no parameter requires
  // grad). The mode is set on the blocks themselves: Network::blocks() gives each block the network's mode.
  std::vector<models::ModulePtr> make_teacher_blocks(TeacherBn bn) const;
  // New student blocks (weights only require grad; supernet architecture parameters are frozen), in
  // training mode. Every call gives the same initial weights and the same path-sampling streams.
  std::vector<models::ModulePtr> make_students(const std::vector<int>& which) const;
  std::vector<models::ModulePtr> make_students() const;

  // The registry spec that rebuilds the stitched student ("" for supernet students, which have none).
  std::string student_model_spec() const;
  std::string describe() const;

 private:
  WorkloadSpec spec_;
  std::vector<Shape> shapes_;  // per block: the output shape for one row
  int64_t num_classes_ = 0;
};

// Sets the teacher's mode: eval throughout, then BatchNorm layers in training mode for TeacherBn::Train.
void set_teacher_mode(models::Module& teacher, TeacherBn bn);

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
