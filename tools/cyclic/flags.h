// tools:cyclic's command line: the flags, their defaults (the paper's CIFAR-10 recipe) and their help.
#pragma once

#include <cstdint>
#include <string>

#include "runtime/tensor/precision.h"

namespace tandem {
namespace cyclic_tool {

struct Flags {
  std::string model = "resnet18:cifar,width=16";
  std::string dataset = "fashion-mnist";
  std::string train_transform, test_transform;  // empty: chosen by dataset
  int64_t subset = 0;                           // use only the first N training samples (0: all)
  int64_t test_subset = 0;                      // evaluate on the first N test samples (0: all)
  std::string rule = "cdp-v1";
  std::string mode = "dp-workers";
  std::string sync = "auto";
  int micro_batches = 4;  // N
  int stages = 4;         // S
  std::string split;      // given stage starts; empty: balanced by FLOPs
  std::string workers;    // empty: cpu:<N or S>
  int64_t batch = 64;     // per micro-batch (per worker in dp-workers)
  double lr = 0.05;
  double momentum = 0.9;
  double weight_decay = 5e-4;
  bool nesterov = false;
  std::string lr_schedule = "step:30:0.2";
  double epochs = 1;
  int64_t max_rounds = 0;  // stop after this many rounds (0: the epochs)
  int64_t log_every = 50;  // rounds per timeline (one log line each)
  int64_t record_rounds =
      0;                  // rounds of the first timeline recorded for memory/comm curves and the trace (0: =log_every)
  double eval_every = 1;  // epochs
  uint64_t seed = 0;
  int loader_threads = 2;
  std::string out;         // output directory (logs, curves, trace)
  std::string checkpoint;  // written at the end of every epoch and at the end
  std::string resume;
  bool simulate = false;  // write unit-time timelines instead of training
  int64_t simulate_rounds = 3;
  std::string gpu;    // with simulate: stage costs from the cost model on this modelled GPU
  int64_t input = 0;  // with gpu: input size (0: 32 for CIFAR models, 224 otherwise)
  Precision precision = Precision::F32;
};

// Parses argv; prints the usage and exits 0 for --help, prints the problem and exits 2 for a bad flag or value
// (tools/flags/flags.h).
Flags parse_flags(int argc, char** argv);

}  // namespace cyclic_tool
}  // namespace tandem
