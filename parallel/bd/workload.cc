// Workloads: building and checking teachers and student blocks.
#include "parallel/bd/workload.h"

#include <sstream>

#include "models/blocks.h"
#include "models/checkpoint.h"
#include "models/layers.h"
#include "models/registry.h"
#include "runtime/base/error.h"
#include "runtime/tensor/precision.h"

namespace tandem {
namespace parallel {
namespace bd {

TeacherBn parse_teacher_bn(const std::string& s) {
  if (s == "eval") return TeacherBn::Eval;
  if (s == "train") return TeacherBn::Train;
  TD_THROW(ValueError, "teacher BatchNorm mode must be 'eval' or 'train', got '", s, "'");
}

const char* teacher_bn_name(TeacherBn m) { return m == TeacherBn::Eval ? "eval" : "train"; }

void set_teacher_mode(models::Module& teacher, TeacherBn bn) {
  teacher.eval();
  if (bn == TeacherBn::Train)
    for (auto& [name, m] : teacher.named_modules())
      if (dynamic_cast<models::BatchNorm2d*>(m) != nullptr) m->train(true);
}

namespace {
bool is_model_spec(const std::string& student) { return student != "supernet" && student != "separable"; }

std::shared_ptr<models::Network> build_teacher(const WorkloadSpec& spec) {
  auto [name, options] = models::parse_model_spec(spec.teacher);
  auto net = models::make_model(name, options);
  if (!spec.teacher_weights.empty()) models::load_weights(spec.teacher_weights, *net);
  for (Tensor& p : net->parameters()) p.set_requires_grad(false);
  return net;
}
}  // namespace

Workload::Workload(WorkloadSpec spec) : spec_(std::move(spec)) {
  TD_CHECK(!spec_.teacher.empty(), "no teacher model given");
  TD_CHECK(spec_.sample.size() == 3, "the input of one sample must be [C, H, W], got ", shape_str(spec_.sample));
  TD_CHECK(spec_.supernet_cells >= 1, "a supernet block needs at least one cell, got ", spec_.supernet_cells);
  auto teacher = build_teacher(spec_);
  num_classes_ = teacher->options().num_classes;
  TD_CHECK(teacher->options().in_channels == spec_.sample[0], "the teacher '", spec_.teacher, "' takes ",
           teacher->options().in_channels, "-channel images but the data has ", spec_.sample[0],
           " channels (set in_channels=", spec_.sample[0], " in the teacher spec)");
  const Shape input = activation_shape(0, 1);
  for (const models::BlockShape& s : models::block_shapes(teacher->blocks(), input)) shapes_.push_back(s.output);
  make_students();  // checks the students' block count and shapes
}

Shape Workload::activation_shape(int j, int64_t rows) const {
  TD_CHECK_INDEX(j >= 0 && j <= blocks(), "activation ", j, " is out of range for ", blocks(), " blocks");
  Shape s = j == 0 ? Shape{1, spec_.sample[0], spec_.sample[1], spec_.sample[2]} : shapes_[j - 1];
  s[0] = rows;
  return s;
}

std::vector<int64_t> Workload::row_bytes() const {
  std::vector<int64_t> out;
  // Block 0's input is the data (f32); a teacher block's output is in the policy's activation dtype.
  for (int j = 0; j <= blocks(); ++j)
    out.push_back(shape_numel(activation_shape(j, 1)) *
                  static_cast<int64_t>(dtype_size(j == 0 ? DType::F32 : activation_dtype(DType::F32))));
  return out;
}

std::vector<models::ModulePtr> Workload::make_teacher_blocks(TeacherBn bn) const {
  std::vector<models::ModulePtr> blocks = build_teacher(spec_)->blocks();
  for (auto& b : blocks) set_teacher_mode(*b, bn);
  return blocks;
}

std::vector<models::ModulePtr> Workload::make_students() const {
  std::vector<int> all;
  for (int b = 0; b < blocks(); ++b) all.push_back(b);
  return make_students(all);
}

std::vector<models::ModulePtr> Workload::make_students(const std::vector<int>& which) const {
  std::vector<models::ModulePtr> all;
  const Shape input = activation_shape(0, 1);
  if (is_model_spec(spec_.student)) {
    auto [name, options] = models::parse_model_spec(spec_.student);
    options.seed = spec_.student_seed;
    auto net = models::make_model(name, options);
    all = net->blocks();
    TD_CHECK(shapes_.empty() || all.size() == shapes_.size(), "block-count mismatch: the teacher '", spec_.teacher,
             "' has ", shapes_.size(), " blocks but the student '", spec_.student, "' has ", all.size());
    std::vector<models::BlockShape> got = models::block_shapes(all, input);
    for (size_t b = 0; b < got.size() && !shapes_.empty(); ++b)
      TD_CHECK_SHAPE(got[b].output == shapes_[b], "student '", spec_.student, "' ", models::block_label(all, b),
                     " gives ", shape_str(got[b].output), " but the teacher's block ", b, " gives ",
                     shape_str(shapes_[b]));
  } else {
    models::StudentOptions o;
    o.kind = spec_.student == "supernet" ? models::StudentKind::Supernet : models::StudentKind::DepthwiseSeparable;
    o.supernet.cells = spec_.supernet_cells;
    o.seed = spec_.student_seed;
    auto teacher = build_teacher(WorkloadSpec{spec_.teacher, "", "", 1, 0, spec_.sample});
    if (o.kind == models::StudentKind::DepthwiseSeparable) {
      all = models::make_student_blocks(*teacher, input, o);
    } else {
      all.resize(static_cast<size_t>(teacher->blocks().size()));
      for (int b : which) all.at(static_cast<size_t>(b)) = models::make_student_block(*teacher, b, input, o);
    }
  }
  std::vector<models::ModulePtr> out;
  for (int b : which) {
    TD_CHECK_INDEX(b >= 0 && b < static_cast<int>(all.size()), "student block ", b, " is out of range for ", all.size(),
                   " blocks");
    models::ModulePtr s = all[static_cast<size_t>(b)];
    for (Tensor& a : s->parameters(models::ParamKind::Architecture)) a.set_requires_grad(false);
    s->train(true);
    out.push_back(s);
  }
  return out;
}

std::string Workload::student_model_spec() const {
  auto with = [](const std::string& spec, const std::string& keys) {
    return spec + (spec.find(':') != std::string::npos ? "," : ":") + keys;
  };
  const std::string seed = "seed=" + std::to_string(spec_.student_seed);
  if (is_model_spec(spec_.student)) return with(spec_.student, seed);
  if (spec_.student == "supernet") {
    if (spec_.sample[1] != spec_.sample[2]) return "";  // the registry's supernet students take square images
    return with(spec_.teacher, "supernet=" + std::to_string(spec_.supernet_cells) +
                                   ",image=" + std::to_string(spec_.sample[1]) + "," + seed);
  }
  return with(spec_.teacher, "separable," + seed);
}

std::string Workload::describe() const {
  std::ostringstream os;
  os << "teacher " << spec_.teacher
     << (spec_.teacher_weights.empty() ? " (untrained)" : " from " + spec_.teacher_weights) << ", student "
     << spec_.student;
  if (spec_.student == "supernet") os << " (" << spec_.supernet_cells << " cells per block)";
  os << ", " << blocks() << " blocks, input " << shape_str(spec_.sample);
  return os.str();
}

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
