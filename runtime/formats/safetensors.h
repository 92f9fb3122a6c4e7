// Safetensors checkpoints: reading and writing named tensors in the format of Hugging Face's safetensors.
//
// Layout: an 8-byte little-endian header length N, N bytes of JSON
//   {"name": {"dtype": "F32", "shape": [2, 3], "data_offsets": [begin, end]}, ..., "__metadata__": {"k": "v"}}
// (padded with spaces to a multiple of 8), then the tensors' bytes (row-major, little-endian); offsets are
// relative to the end of the header. Files written by PyTorch's `safetensors.torch.save_file` load unchanged.
#pragma once

#include <map>
#include <string>
#include <utility>
#include <vector>

#include "runtime/tensor/tensor.h"

namespace tandem {

// Tensors in a fixed order (state dicts keep registration order).
using NamedTensors = std::vector<std::pair<std::string, Tensor>>;
using SafetensorsMetadata = std::map<std::string, std::string>;

struct SafetensorsContents {
  NamedTensors tensors;  // CPU tensors, in the order of their data offsets
  SafetensorsMetadata metadata;
  // The tensor named `name`, or nullptr.
  const Tensor* find(const std::string& name) const;
};

// Writes atomically: to `path.tmp`, fsync, then rename over `path` (a crash leaves the old file intact).
// Tensors may live on any device; names must be unique and non-empty. Throws IoError on a failed write.
void save_safetensors(const std::string& path, const NamedTensors& tensors, const SafetensorsMetadata& metadata = {});

// Reads the whole file. Throws IoError for a missing, truncated or corrupt file, naming the file and the
// byte offset or tensor name at fault, and DTypeError for a dtype Tandem has no type for.
SafetensorsContents load_safetensors(const std::string& path);

}  // namespace tandem
