// Loader: batches of a dataset, decoded and augmented by worker threads into (pinned) host memory and copied
// to the device on a copy stream, with deterministic shuffling, sharding and hybrid-group row splits.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "data/dataset.h"
#include "data/transforms.h"
#include "runtime/base/device.h"
#include "runtime/base/non_copyable.h"
#include "runtime/tensor/tensor.h"

namespace tandem {
namespace data {

struct Batch {
  Tensor images;  // [B, C, H, W] f32 on the loader's device
  Tensor labels;  // [B] i64 on the loader's device
  int64_t epoch = 0;
  int64_t index = 0;  // batch index within the epoch (of this shard)
};

struct LoaderOptions {
  int64_t batch_size = 128;  // rows of a global batch (before a hybrid split)
  bool shuffle = true;
  bool drop_last = true;  // drop a last, partial batch
  uint64_t seed = 0;      // shuffling and augmentation
  int num_workers = 2;    // threads that build batches; 0 builds them in next()
  int prefetch = 4;       // batches built ahead of next() (at least num_workers)
  Device device = Device::cpu();
  // Data parallelism: shard `shard_rank` of `num_shards` gets rows_for(shard_rank, num_shards, N) of each
  // epoch's permutation of the N samples (disjoint shards that cover the epoch).
  int64_t shard_rank = 0;
  int64_t num_shards = 1;
  // Hybrid groups: every member reads the same global batches and keeps rows_for(split_rank, split_size, B).
  int64_t split_rank = 0;
  int64_t split_size = 1;
  int64_t first_epoch = 0;
};

// Batch b of epoch e (of this shard) holds the shard's samples [b * batch_size, (b + 1) * batch_size) in the
// epoch's order, restricted to this rank's rows when split. With drop_last every shard yields
// floor(floor(N / num_shards) / batch_size) full batches (the same count on every shard); without it each
// shard yields all its samples and a shard's count can be one higher than another's.
//
// On a CUDA device, workers fill page-locked host batches and queue their copies on the loader's copy stream;
// next() makes the caller's current stream wait on the copy's event, and a host buffer is reused only after
// its copy's event has completed. On the CPU, batches are host tensors (not page-locked) used as they are.
// Results are the same for any num_workers and prefetch: they depend on (seed, epoch, sample) only.
// One thread consumes a Loader (next, set_epoch); the workers are internal.
class Loader : NonCopyable {
 public:
  Loader(std::shared_ptr<const Dataset> dataset, Pipeline pipeline, LoaderOptions options);
  ~Loader();  // stops and joins the workers

  // The next batch of the current epoch, or nullopt once the epoch is over (the following call starts the
  // next epoch). A worker's exception is rethrown here, as its original type, for the batch it broke.
  std::optional<Batch> next();
  // Restarts at batch 0 of `epoch` (prefetched batches are discarded).
  void set_epoch(int64_t epoch);

  int64_t epoch() const;  // the epoch of the batch next() returns
  int64_t batches_per_epoch() const;
  int64_t shard_size() const;  // samples of each epoch that go to this shard
  Shape image_shape() const;   // [C, H, W] of one transformed sample
  const LoaderOptions& options() const;
  const Dataset& dataset() const;

  // Images delivered by next() per second of wall time, from its first call until its latest return.
  double images_per_second() const;
  // Seconds next() spent waiting for batches that were not ready (time the consumer was starved).
  double wait_seconds() const;
  // Bytes of page-locked host memory in the pool of host batches that wait for reuse (0 on the CPU, where
  // batches are plain host tensors handed out as they are).
  int64_t pinned_pool_bytes() const;

 private:
  struct State;
  std::unique_ptr<State> s_;
};

}  // namespace data
}  // namespace tandem
