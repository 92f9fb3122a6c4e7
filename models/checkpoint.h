// Training checkpoints as one safetensors file. Model tensors keep their state_dict names (torchvision's for
// the zoo), so the file is a torchvision state_dict plus prefixed extras:
//   "optimizer.<param>.<field>"  optimizer state (momentum_buffer / exp_avg, exp_avg_sq, step)
//   "scheduler.position"         learning-rate schedule position (optimizer steps taken)
//   "rng.<module path>.<name>"   generator states of dropout and supernet sampling
// and metadata {"format": "pt", "tandem.checkpoint": "1", "tandem.optimizer": "sgd", ...caller's keys}.
// PyTorch loads the model part with load_state_dict(strict=False), or after dropping those prefixes.
#pragma once

#include <string>

#include "models/module.h"
#include "runtime/formats/safetensors.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/optim.h"

namespace tandem {
namespace models {

// Writes atomically (see save_safetensors). optimizer and scheduler may be null.
void save_checkpoint(const std::string& path, const Module& model, const optim::Optimizer* optimizer,
                     const optim::LrScheduler* scheduler, const SafetensorsMetadata& metadata = {});

// Restores what save_checkpoint wrote into the given objects (null ones are skipped) and returns the
// metadata. Missing or unexpected model keys, a shape mismatch, an optimizer of another kind, or a file
// without the state asked for throw ValueError/ShapeError naming the file and the key.
SafetensorsMetadata load_checkpoint(const std::string& path, Module& model, optim::Optimizer* optimizer,
                                    optim::LrScheduler* scheduler);

// Model weights only, from a Tandem checkpoint or a torchvision state_dict saved as safetensors.
void load_weights(const std::string& path, Module& model, bool strict = true);

}  // namespace models
}  // namespace tandem
