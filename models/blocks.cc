// Block shapes, stitching, and the student factory.
#include "models/blocks.h"

#include "models/registry.h"
#include "runtime/base/error.h"

namespace tandem {
namespace models {

std::string block_label(const std::vector<ModulePtr>& blocks, size_t i) {
  auto* seq = dynamic_cast<const Sequential*>(blocks.at(i).get());
  if (seq && !seq->label().empty()) return seq->label();
  return "block " + std::to_string(i) + " (" + blocks[i]->describe() + ")";
}

std::vector<BlockShape> block_shapes(const std::vector<ModulePtr>& blocks, const Shape& input) {
  TD_CHECK(!blocks.empty(), "block_shapes: no blocks");
  std::vector<BlockShape> out;
  Shape s = input;
  for (size_t i = 0; i < blocks.size(); ++i) {
    TD_CHECK(blocks[i] != nullptr, "block_shapes: block ", i, " is null");
    try {
      out.push_back({s, blocks[i]->output_shape(s)});
    } catch (const ShapeError& e) {
      if (i == 0)
        TD_THROW(ShapeError, block_label(blocks, 0), " does not accept the input ", shape_str(s), ": ", e.message());
      TD_THROW(ShapeError, block_label(blocks, i), " does not accept the output ", shape_str(s), " of ",
               block_label(blocks, i - 1), ": ", e.message());
    }
    s = out.back().output;
  }
  return out;
}

std::shared_ptr<Sequential> stitch_blocks(const std::vector<ModulePtr>& blocks, const Shape& input) {
  block_shapes(blocks, input);
  auto model = std::make_shared<Sequential>();
  for (size_t i = 0; i < blocks.size(); ++i) {
    auto* seq = dynamic_cast<Sequential*>(blocks[i].get());
    if (seq && !seq->empty())
      for (size_t j = 0; j < seq->size(); ++j) model->add(seq->name_at(j), seq->at(j));
    else
      model->add("block" + std::to_string(i), blocks[i]);
  }
  return model;
}

namespace {
// The last 4-D activation inside a block (its output if it is 4-D): a head block's feature map.
Shape last_feature_shape(const ModulePtr& block, const Shape& input) {
  auto* seq = dynamic_cast<const Sequential*>(block.get());
  Shape s = input, last = input;
  if (!seq) return last;
  for (size_t i = 0; i < seq->size(); ++i) {
    s = seq->at(i)->output_shape(s);
    if (s.size() == 4) last = s;
  }
  return last;
}

// Students for the blocks `which` of the teacher partitioned at `starts`.
std::vector<ModulePtr> make_students(const Network& teacher, const Shape& input, const StudentOptions& o,
                                     const std::vector<size_t>& starts_in, const std::vector<size_t>& which) {
  const std::vector<size_t>& starts = starts_in.empty() ? teacher.block_starts() : starts_in;
  std::vector<ModulePtr> tblocks = teacher.blocks(starts);
  std::vector<BlockShape> shapes = block_shapes(tblocks, input);
  std::vector<ModulePtr> all_ds;
  if (o.kind == StudentKind::DepthwiseSeparable) {
    ModelOptions so = teacher.options();
    so.separable = true;
    so.seed = o.seed;
    all_ds = make_model(teacher.model_name(), so)->blocks(starts);
  }
  std::vector<ModulePtr> students;
  for (size_t i : which) {
    TD_CHECK_INDEX(i < tblocks.size(), "student block ", i, " is out of range for ", tblocks.size(), " blocks");
    ModulePtr student;
    if (o.kind == StudentKind::DepthwiseSeparable) {
      student = all_ds[i];
    } else {
      SupernetBlockSpec spec = o.supernet;
      spec.seed = o.seed * 7919u + i;
      auto block =
          make_supernet_block(shapes[i].input, shapes[i].output, last_feature_shape(tblocks[i], shapes[i].input), spec);
      block->set_label("student block " + std::to_string(i));
      student = block;
    }
    Shape got = student->output_shape(shapes[i].input);
    TD_CHECK_T(InternalError, got == shapes[i].output, "student block ", i, " gives ", shape_str(got),
               " but the teacher's block gives ", shape_str(shapes[i].output));
    students.push_back(student);
  }
  return students;
}
}  // namespace

std::vector<ModulePtr> make_student_blocks(const Network& teacher, const Shape& input, const StudentOptions& o,
                                           const std::vector<size_t>& starts) {
  size_t n = (starts.empty() ? teacher.block_starts() : starts).size();
  std::vector<size_t> all(n);
  for (size_t i = 0; i < n; ++i) all[i] = i;
  return make_students(teacher, input, o, starts, all);
}

ModulePtr make_student_block(const Network& teacher, size_t index, const Shape& input, const StudentOptions& o,
                             const std::vector<size_t>& starts) {
  return make_students(teacher, input, o, starts, {index})[0];
}

}  // namespace models
}  // namespace tandem
