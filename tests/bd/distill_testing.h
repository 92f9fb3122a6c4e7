// Helpers for the Pipe-BD tests: small workloads, the sequential reference loop, in-process strategy runs,
// and weight comparisons.
#pragma once

#include <map>
#include <memory>
#include <string>
#include <vector>

#include "parallel/bd/runner.h"
#include "parallel/bd/strategy.h"
#include "parallel/bd/workload.h"

namespace tandem {
namespace parallel {
namespace bd {
namespace testing {

// Final weights (state dicts: parameters and BatchNorm buffers) of each block.
using BlockWeights = std::map<int, NamedTensors>;

// The two workloads at test size on 16x16 RGB inputs: (a) NAS-like, a MobileNetV2 (CIFAR variant, width
// 0.25) teacher with supernet students, 6 blocks; (b) compression, a ResNet-18 (width 4) teacher with
// depthwise-separable students, 4 blocks. Teachers keep their seeded initialization.
WorkloadSpec nas_workload(uint64_t seed);
WorkloadSpec compression_workload(uint64_t seed);

// A context on seeded synthetic data: `samples` images, batch `batch`, `epochs` epochs, SGD with Nesterov
// momentum and weight decay under a cosine schedule, loader in the worker's thread.
RunContext make_context(const Workload& w, uint64_t seed, int64_t samples, int64_t batch, int64_t epochs);

// A plain sequential loop that trains every block on one thread: for each step, for each block, the teacher
// forward from the previous block's output, the student forward, loss, backward and step. Where replicas[b]
// is g > 1, block b has g copies that see rows data::rows_for(q, g, B) of each batch (or, with `dp_shards`,
// batch b of loader shard q of g, at B / g rows), run their own teacher chain on those rows, and average
// their gradients like the communicators' all_reduce (summed in rank order in f32, the sum times 1/g formed
// in f64 and rounded once); copy 0's weights are returned (on the CPU). An empty `replicas` means 1 for every
// block. Models and activations live on `device` (the loader's batches are copied there).
BlockWeights reference_run(const RunContext& ctx, const std::vector<int>& replicas = {}, bool dp_shards = false,
                           Device device = Device::cpu());

// Runs the layout on in-process workers (local communicators): `workers` is a make_workers spec naming
// `layout.workers` workers ("": that many CPU threads). Returns every block's final weights (merged over the
// ranks that saved them, on the CPU) and rank 0's result.
BlockWeights run_in_process(const RunContext& ctx, const Layout& layout, StrategyResult* result = nullptr,
                            MessageMatching matching = MessageMatching::ByTag, const std::string& workers = "");

// A pipeline plan from "first-last:replicas" stage items, e.g. {{0, 1, 2}, {2, 5, 1}}.
Plan make_plan(const std::vector<Stage>& stages);

// EXPECTs bitwise equality of every tensor of every block.
void expect_same_weights(const BlockWeights& got, const BlockWeights& want, const std::string& what);
// The largest error over all floating tensors of all blocks, relative to the largest magnitude of the block's
// floating tensors (see tests/testing.h compare_values: a bias or running mean near zero holds the rounding of its
// block's computation, not of its own size).
double max_weight_error(const BlockWeights& got, const BlockWeights& want);

}  // namespace testing
}  // namespace bd
}  // namespace parallel
}  // namespace tandem
