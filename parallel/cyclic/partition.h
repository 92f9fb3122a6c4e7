// Cutting a model into S contiguous stages: its units (the items a stage boundary may fall between), FLOPs per
// unit counted from shapes, and the split balanced by FLOPs or given by the user.
//
// The official code assigns FLOPs to parameter tensors (a bias gets the square root of its layer's FLOPs) and
// cuts the list of tensors; here a stage must be an executable piece of the model, so cuts fall between units:
// the model's top-level items, with those that split into units (plain Sequentials: ResNet's layer1..layer4)
// opened into their children (the residual blocks). A unit's FLOPs are its module's (Module::flops: layers'
// multiply-accumulates for one sample, biases included in their layer), so the square-root heuristic has
// nothing to decide.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "models/module.h"
#include "models/sequential.h"

namespace tandem {
namespace parallel {
namespace cyclic {

struct Unit {
  std::string name;  // its state_dict prefix, e.g. "layer2.1"
  models::ModulePtr module;
  Shape input, output;  // for one sample (batch 1)
  double flops = 0;
};

// The units of `model` for inputs of shape `sample` ([1, C, H, W]); ShapeError if the input does not fit.
std::vector<Unit> model_units(const models::Sequential& model, const Shape& sample);

// Stage starts (unit indices, the first 0) of the contiguous split into `stages` stages that minimizes the
// largest stage's FLOPs (ties: the earliest cuts). ValueError when stages > units.
std::vector<size_t> balanced_split(const std::vector<Unit>& units, int stages);

// Parses a given split: stage starts as unit indices or unit names, comma-separated ("0,5,9,12" or
// "conv1,layer2.0,layer3.0,layer4.0"); must start at the first unit and increase. ValueError naming the problem.
std::vector<size_t> parse_split(const std::string& spec, const std::vector<Unit>& units);

// The stages as Sequentials sharing the units (items keep their names, so a stage's state_dict keys are the
// model's). `starts` as returned above.
std::vector<std::shared_ptr<models::Sequential>> make_stages(const std::vector<Unit>& units,
                                                             const std::vector<size_t>& starts);

// "conv1 .. layer1.1 | layer2.0 .. layer2.1 | ..." for logs.
std::string describe_split(const std::vector<Unit>& units, const std::vector<size_t>& starts);

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
