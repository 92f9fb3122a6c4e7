// Block partitions for blockwise distillation: shapes at block boundaries (known before running), stitching
// blocks back into one model, and the student factory that builds, for any block of a teacher network, a
// student block with the same input and output shapes.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "models/sequential.h"
#include "models/zoo/network.h"
#include "models/zoo/supernet.h"

namespace tandem {
namespace models {

struct BlockShape {
  Shape input;
  Shape output;
};

// "block 2 (layer3)": a block's label, or "block i (<describe()>)".
std::string block_label(const std::vector<ModulePtr>& blocks, size_t i);

// The input and output shape of each block when the first gets `input`. A block that does not accept its
// predecessor's output throws ShapeError naming both blocks and the shapes.
std::vector<BlockShape> block_shapes(const std::vector<ModulePtr>& blocks, const Shape& input);

// One model running the blocks in order (after checking their shapes for `input`). Items of Sequential
// blocks are taken over with their names (so a network's blocks stitch back to its own state_dict keys);
// other blocks become items "block<i>".
std::shared_ptr<Sequential> stitch_blocks(const std::vector<ModulePtr>& blocks, const Shape& input);

enum class StudentKind {
  DepthwiseSeparable,  // the teacher block with each k x k conv made depthwise-separable (ModelOptions::separable)
  Supernet,            // MBConv supernet cells (make_supernet_block)
};

struct StudentOptions {
  StudentKind kind = StudentKind::Supernet;
  SupernetBlockSpec supernet;  // cells, stem width, zero candidate
  uint64_t seed = 0;           // initialization and path sampling (different per block by construction)
};

// A student for block `index` of `teacher` partitioned at `starts` (empty: the teacher's default), for
// teacher input `input`: its input and output shapes equal the teacher block's.
ModulePtr make_student_block(const Network& teacher, size_t index, const Shape& input, const StudentOptions& options,
                             const std::vector<size_t>& starts = {});
// Students for every block.
std::vector<ModulePtr> make_student_blocks(const Network& teacher, const Shape& input, const StudentOptions& options,
                                           const std::vector<size_t>& starts = {});

}  // namespace models
}  // namespace tandem
