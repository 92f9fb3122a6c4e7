// Trainer: supervised training of a registry model on an open_dataset spec, with per-epoch evaluation,
// progress lines (images/s after the warm-up step), checkpoints every epoch and bitwise-exact resumption.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

#include "runtime/base/non_copyable.h"
#include "runtime/tensor/precision.h"

namespace tandem {
namespace train {

struct TrainOptions {
  std::string model = "resnet18:cifar";   // a model spec (models/registry.h); classes and in_channels default
                                          // to the dataset's
  std::string dataset = "fashion-mnist";  // an open_dataset spec (train and test splits)
  std::string transform = "auto";         // training transform (data/transforms.h); auto: by dataset
  int64_t epochs = 1;
  int64_t stop_after = 0;  // stop after this many epochs of this run (0: run to `epochs`); resume later
  int64_t batch = 128;
  double lr = 0.1;
  std::string optimizer = "sgd";  // sgd (momentum 0.9, Nesterov), adam, adamw
  double momentum = 0.9;
  double weight_decay = 5e-4;
  double label_smoothing = 0.0;
  std::string schedule = "cosine";       // runtime/optim/lr_schedule.h spec
  std::string device;                    // empty: the best device present
  Precision precision = Precision::F32;  // the policy of runtime/tensor/precision.h for training and evaluation
  std::string checkpoint;                // written at the end of every epoch (atomically)
  std::string resume;                    // continue from this checkpoint
  uint64_t seed = 0;
  int workers = 2;              // loader threads
  int64_t steps_per_epoch = 0;  // 0: the whole training split
  int64_t log_every = 50;       // progress line every N steps (0: none)
  bool live_progress = false;  // the live display of runtime/progress/progress.h on stderr (steps, images/s, time left)
  bool evaluate = true;        // test accuracy after each epoch
  int64_t profile_steps = 0;   // profile steps 2..N+1 of the run's first epoch (after the warm-up) and print the
                               // kernel profiler's tables; 0: none
  std::string profile_trace;   // with profile_steps: write that profile as a Chrome trace here
  bool cuda_graph = false;     // replay a captured CUDA graph of the step (runtime/memory/cuda_graph.h)
  std::string eval_only;       // weights to evaluate on the test split (no training): a Tandem checkpoint
                               // or a torchvision-layout safetensors file
  // Test hooks: the clock the epoch timings read (seconds from any origin; empty: a steady clock), and a call
  // before each step (epoch and step from 0).
  std::function<double()> clock;
  std::function<void(int64_t epoch, int64_t step)> before_step;
};

struct EpochResult {
  int64_t epoch = 0;
  std::vector<double> step_losses;  // the loss of every step, in order
  double train_loss = 0;            // mean over the epoch's steps
  double train_accuracy = 0;        // fraction of training images classified right (in training mode)
  double test_accuracy = -1;        // -1 when not evaluated
  double images_per_second = 0;     // over the whole epoch
  // The first step (warm-up: cuDNN's algorithm choices, allocations, lazy loading) and the rate of the steps
  // after it, which the epoch's line reports; 0 when the epoch has a single step.
  double first_step_seconds = 0;
  double steady_images_per_second = 0;
  double seconds = 0;
};

class Trainer : NonCopyable {
 public:
  // Builds the model, data, optimizer and schedule (and restores `resume`); writes the parameter count
  // and memory plan to `log`. Throws ValueError/IoError for bad options, specs or files.
  Trainer(const TrainOptions& options, std::ostream& log);
  ~Trainer();

  // Trains the remaining epochs (all, or those after the resumed checkpoint).
  std::vector<EpochResult> run();
  // Accuracy of the model in evaluation mode on the whole test split.
  double test_accuracy();
  int64_t first_epoch() const;  // the epoch run() starts at

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace train
}  // namespace tandem
