// Network: a model as a flat chain of named top-level items (torchvision's key names), with the default
// partition into contiguous blocks that blockwise distillation trains separately.
#pragma once

#include <string>
#include <vector>

#include "models/sequential.h"
#include "models/zoo/options.h"

namespace tandem {
namespace models {

class Network : public Sequential {
 public:
  Network(std::string model_name, ModelOptions options);

  const std::string& model_name() const { return model_name_; }
  const ModelOptions& options() const { return options_; }
  // [batch, in_channels, 32 or 224, same]: the input size the variant is made for.
  Shape default_input_shape(int64_t batch) const;

  // Where each block of the default partition starts (item indices, the first 0, increasing).
  const std::vector<size_t>& block_starts() const { return block_starts_; }
  void set_block_starts(std::vector<size_t> starts);  // ValueError unless valid
  // The items [starts[i], starts[i + 1]) as Sequentials that share this network's modules and keep their
  // item names, so a block's state_dict keys are the network's. Each is labelled "block i (first .. last)".
  std::vector<ModulePtr> blocks() const { return blocks(block_starts_); }
  std::vector<ModulePtr> blocks(const std::vector<size_t>& starts) const;

 private:
  std::string model_name_;
  ModelOptions options_;
  std::vector<size_t> block_starts_{0};
};

}  // namespace models
}  // namespace tandem
