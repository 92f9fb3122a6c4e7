// Network: block partitions of a flat chain of items.
#include "models/zoo/network.h"

#include "runtime/base/error.h"

namespace tandem {
namespace models {

Network::Network(std::string model_name, ModelOptions options)
    : Sequential(model_name), model_name_(std::move(model_name)), options_(options) {}

Shape Network::default_input_shape(int64_t batch) const {
  int64_t side = options_.cifar ? 32 : 224;
  return {batch, options_.in_channels, side, side};
}

namespace {
void check_starts(const std::vector<size_t>& starts, size_t items, const std::string& model) {
  TD_CHECK(!starts.empty() && starts[0] == 0, model, ": a block partition must start at item 0");
  for (size_t i = 1; i < starts.size(); ++i)
    TD_CHECK(starts[i] > starts[i - 1], model, ": block starts must be increasing (no empty block), got ",
             starts[i - 1], " then ", starts[i]);
  TD_CHECK(starts.back() < items, model, ": block start ", starts.back(), " is past the last item (", items, " items)");
}
}  // namespace

void Network::set_block_starts(std::vector<size_t> starts) {
  check_starts(starts, size(), model_name_);
  block_starts_ = std::move(starts);
}

std::vector<ModulePtr> Network::blocks(const std::vector<size_t>& starts) const {
  check_starts(starts, size(), model_name_);
  std::vector<ModulePtr> out;
  for (size_t b = 0; b < starts.size(); ++b) {
    size_t end = b + 1 < starts.size() ? starts[b + 1] : size();
    auto block = std::make_shared<Sequential>();
    for (size_t i = starts[b]; i < end; ++i) block->add(name_at(i), at(i));
    block->set_label("block " + std::to_string(b) + " (" + name_at(starts[b]) +
                     (end - starts[b] > 1 ? " .. " + name_at(end - 1) : "") + ")");
    out.push_back(block);
  }
  return out;
}

}  // namespace models
}  // namespace tandem
