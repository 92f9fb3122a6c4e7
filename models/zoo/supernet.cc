// Supernet cells and shape-driven supernet student blocks.
#include "models/zoo/supernet.h"

#include <cmath>
#include <sstream>

#include "models/layers.h"
#include "models/zoo/common.h"
#include "models/zoo/mobilenet_v2.h"
#include "runtime/base/error.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"

namespace tandem {
namespace models {

SupernetCell::SupernetCell(const SupernetCellSpec& spec, Generator& gen)
    : Module("SupernetCell"), residual_(spec.stride == 1 && spec.in == spec.out), sampler_(spec.sample_seed) {
  TD_CHECK(spec.in > 0 && spec.out > 0, "SupernetCell needs positive channel counts, got ", spec.in, " -> ", spec.out);
  for (int64_t kernel : {3, 5, 7})
    for (int64_t expand : {3, 6}) {
      std::string name = "mb" + std::to_string(kernel) + "_e" + std::to_string(expand);
      // The cell adds the shortcut itself, around whichever candidate runs.
      auto op = std::make_shared<InvertedResidual>(spec.in, spec.out, spec.stride, expand, kernel, false, gen, spec.bn);
      register_module(name, op);
      names_.push_back(name);
      ops_.push_back(op);
    }
  if (spec.zero_candidate && residual_) {
    names_.push_back("zero");
    ops_.push_back(nullptr);
  }
  alpha = parameter_tensor({static_cast<int64_t>(names_.size())});
  alpha.fill_(0.0);
  register_parameter("alpha", &alpha, ParamKind::Architecture);
  register_generator("sampler", &sampler_);
}

std::vector<double> SupernetCell::probabilities() const {
  const void* storage = alpha.storage().data();
  if (probs_version_ != alpha.version() || probs_storage_ != storage) {
    std::vector<double> a = alpha.to_vector<double>();
    double m = a[0];
    for (double v : a) m = std::max(m, v);
    double total = 0;
    probs_.assign(a.size(), 0.0);
    for (size_t i = 0; i < a.size(); ++i) total += probs_[i] = std::exp(a[i] - m);
    for (double& p : probs_) p /= total;
    probs_version_ = alpha.version();
    probs_storage_ = storage;
  }
  return probs_;
}

size_t SupernetCell::most_likely() const {
  std::vector<double> p = probabilities();
  size_t best = 0;
  for (size_t i = 1; i < p.size(); ++i)
    if (p[i] > p[best]) best = i;
  return best;
}

size_t SupernetCell::sample() {
  std::vector<double> p = probabilities();
  double u = sampler_.uniform(), cumulative = 0;
  for (size_t i = 0; i < p.size(); ++i) {
    cumulative += p[i];
    if (u < cumulative) return i;
  }
  return p.size() - 1;  // u within rounding of 1
}

std::vector<SupernetCell*> supernet_cells(Module& m) {
  std::vector<SupernetCell*> cells;
  for (auto& [name, sub] : m.named_modules())
    if (auto* cell = dynamic_cast<SupernetCell*>(sub)) cells.push_back(cell);
  return cells;
}

size_t SupernetCell::draw_path() { return fixed_ ? *fixed_ : sample(); }

void SupernetCell::fix_path(std::optional<size_t> path) {
  TD_CHECK(!path || *path < names_.size(), "SupernetCell: path ", path.value_or(0), " is out of range for ",
           names_.size(), " candidates");
  fixed_ = path;
  if (path) active_ = *path;
}

Tensor SupernetCell::forward(const Tensor& x) {
  active_ = fixed_ ? *fixed_ : (is_training() ? sample() : most_likely());
  const ModulePtr& op = ops_[active_];
  if (!op) return x;  // zero candidate: only the shortcut remains
  Tensor y = op->forward(x);
  if (autograd::grad_enabled() && alpha.requires_grad()) {
    Tensor p = softmax(alpha, 0).select(0, static_cast<int64_t>(active_));
    y = mul(y, add(sub(p, p.detach()), 1.0));
  }
  return residual_ ? add(x, y) : y;
}

Shape SupernetCell::output_shape(const Shape& input) const { return ops_[0]->output_shape(input); }

std::string SupernetCell::describe() const {
  std::ostringstream os;
  os << "SupernetCell(" << ops_[0]->describe() << ", " << names_.size() << " candidates)";
  return os.str();
}

namespace {
// Number of stride-2 cells taking `from` to `to` (a power-of-2 ratio), or -1.
int64_t halvings(int64_t from, int64_t to) {
  int64_t n = 0;
  while (from > to && from % 2 == 0) {
    from /= 2;
    ++n;
  }
  return from == to ? n : -1;
}

// Stem (for images) and cells taking [C, H, W] to [out_c, H', W'].
void add_body(Sequential& block, Shape in, int64_t out_c, int64_t out_h, int64_t out_w, const SupernetBlockSpec& s,
              Generator& gen) {
  int64_t down = halvings(in[2], out_h);
  TD_CHECK_SHAPE(down >= 0 && halvings(in[3], out_w) == down, "supernet student: cannot go from ", shape_str(in),
                 " to spatial size ", out_h, "x", out_w, " with stride-2 cells (needs a power-of-2 ratio)");
  int64_t c = in[1];
  if (c <= 4) {
    int64_t stem = s.stem_channels > 0 ? s.stem_channels : out_c;
    block.add("stem", conv_bn_act(conv_spec(c, stem, 3, down > 0 ? 2 : 1), Activation::ReLU6, false, gen, s.bn));
    if (down > 0) --down;
    c = stem;
  }
  int64_t cells = std::max(s.cells, down);
  TD_CHECK(cells >= 1, "supernet student: at least one cell is needed, got ", s.cells);
  for (int64_t i = 0; i < cells; ++i) {
    SupernetCellSpec cs;
    cs.in = c;
    cs.out = out_c;
    cs.stride = i < down ? 2 : 1;
    cs.zero_candidate = s.zero_candidate;
    cs.sample_seed = s.seed * 1000003ull + static_cast<uint64_t>(block.size());
    cs.bn = s.bn;
    block.add("cell" + std::to_string(i), std::make_shared<SupernetCell>(cs, gen));
    c = out_c;
  }
}
}  // namespace

std::shared_ptr<Sequential> make_supernet_block(const Shape& input, const Shape& output, const Shape& feature_shape,
                                                const SupernetBlockSpec& spec) {
  TD_CHECK_SHAPE(input.size() == 4, "supernet student: the block input must be [N, C, H, W], got ", shape_str(input));
  TD_CHECK_SHAPE((output.size() == 4 || output.size() == 2) && output[0] == input[0],
                 "supernet student: the block output must be [N, C, H, W] or [N, K] with the input's N, got ",
                 shape_str(output), " for input ", shape_str(input));
  Generator gen(spec.seed);
  auto block = std::make_shared<Sequential>();
  if (output.size() == 4) {
    add_body(*block, input, output[1], output[2], output[3], spec, gen);
    init_like_torchvision(*block, LinearInit::Normal001, gen);
    return block;
  }
  TD_CHECK_SHAPE(feature_shape.size() == 4 && feature_shape[0] == input[0], "supernet student: a head block needs ",
                 "the teacher's last feature map [N, C, H, W], got ", shape_str(feature_shape));
  int64_t head = feature_shape[1];
  int64_t width = std::min(2 * input[1], head);
  add_body(*block, input, width, feature_shape[2], feature_shape[3], spec, gen);
  block->add("head", conv_bn_act(conv_spec(width, head, 1), Activation::ReLU6, false, gen, spec.bn));
  block->add("avgpool", std::make_shared<GlobalAvgPool>());
  block->add("fc", std::make_shared<Linear>(head, output[1], true, gen));
  init_like_torchvision(*block, LinearInit::Normal001, gen);
  return block;
}

}  // namespace models
}  // namespace tandem
