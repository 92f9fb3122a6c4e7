// Loader on a CUDA device: batches built in page-locked host buffers and copied on the loader's copy stream
// equal the CPU loader's batches, and the consumer's stream is ordered after the copy (the stream checker
// accepts it and reports a stream that skipped the wait).
#include <gtest/gtest.h>

#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "runtime/base/error.h"
#include "runtime/memory/stream.h"
#include "tests/testing.h"

namespace tandem {
namespace data {
namespace {

std::shared_ptr<const Dataset> dataset(uint64_t seed) {
  SyntheticOptions so;
  so.size = 100;
  so.seed = seed;
  return make_synthetic(so, true);
}

LoaderOptions options(uint64_t seed, int workers, Device device) {
  LoaderOptions o;
  o.batch_size = 16;
  o.seed = seed;
  o.num_workers = workers;
  o.prefetch = 6;
  o.device = device;
  return o;
}

// With worker threads and without (batches built in next()), over two epochs.
TEST(LoaderGpu, DeviceBatchesEqualHostBatches) {
  TD_REQUIRE_GPU();
  for (int workers : {0, 2}) {
    SCOPED_TRACE(std::to_string(workers) + " loader threads");
    uint64_t seed = testing::fresh_seed();
    auto ds = dataset(seed);
    Loader host(ds, Pipeline::parse("cifar-train"), options(seed, workers, Device::cpu()));
    Loader dev(ds, Pipeline::parse("cifar-train"), options(seed, workers, Device::cuda(0)));
    // Consume on a stream of our own: next() must order it after the loader's copy stream.
    Stream compute = Stream::create(Device::cuda(0));
    StreamGuard guard(compute);
    std::vector<Batch> kept;  // held device batches must stay intact while later copies run
    for (int e = 0; e < 2; ++e) {
      while (auto d = dev.next()) {
        auto h = host.next();
        ASSERT_TRUE(h.has_value());
        EXPECT_TRUE(d->images.device().is_cuda());
        EXPECT_TRUE(d->labels.device().is_cuda());
        testing::expect_bitwise_equal(d->images.to(Device::cpu()), h->images, "device images");
        testing::expect_bitwise_equal(d->labels.to(Device::cpu()), h->labels, "device labels");
        Batch copy = *h;
        copy.images = h->images.clone();
        kept.push_back(*d);
        kept.push_back(copy);
      }
      EXPECT_FALSE(host.next().has_value());
    }
    for (size_t i = 0; i + 1 < kept.size(); i += 2)
      testing::expect_bitwise_equal(kept[i].images.to(Device::cpu()), kept[i + 1].images, "kept batch");
  }
}

// The host buffers a CUDA loader builds batches in are page-locked (so that their copies are asynchronous);
// the CPU loader's are plain host memory.
TEST(LoaderGpu, HostBuffersArePageLocked) {
  TD_REQUIRE_GPU();
  uint64_t seed = testing::fresh_seed();
  auto ds = dataset(seed);
  for (Device device : {Device::cuda(0), Device::cpu()}) {
    // No loader threads: with them, the pool can be empty at any moment (their prefetch holds its buffers).
    Loader loader(ds, Pipeline::parse("cifar-train"), options(seed, 0, device));
    const int64_t batch_bytes = 16 * (shape_numel(loader.image_shape()) * 4 + 8);  // f32 images, i64 labels
    while (loader.next()) {
    }
    current_stream(Device::cuda(0)).synchronize();
    if (device.is_cuda())
      EXPECT_GE(loader.pinned_pool_bytes(), batch_bytes) << "no page-locked host batch in the pool";
    else
      EXPECT_EQ(loader.pinned_pool_bytes(), 0);
  }
}

// Under the stream checker: reading each batch on the stream that called next() is ordered after the loader's
// copy, and a read on another stream that did not wait is reported. Batches are built in next() (no loader
// threads), so no copy of a later batch is queued before the host synchronizes with an earlier one's reader.
TEST(LoaderGpu, ConsumerStreamIsOrderedAfterTheCopy) {
  TD_REQUIRE_GPU();
  testing::StreamCheckOn checking;
  uint64_t seed = testing::fresh_seed();
  auto ds = dataset(seed);
  Loader host(ds, Pipeline::parse("cifar-train"), options(seed, 0, Device::cpu()));
  Loader dev(ds, Pipeline::parse("cifar-train"), options(seed, 0, Device::cuda(0)));
  const Stream consumer = Stream::create(Device::cuda(0)), other = Stream::create(Device::cuda(0));
  int batches = 0;
  for (;;) {
    std::optional<Batch> d;
    {
      StreamGuard on_consumer(consumer);
      d = dev.next();
    }
    if (!d) break;
    {
      StreamGuard on_other(other);
      EXPECT_THROW(d->labels.to(DType::F32), StreamOrderError)
          << "batch " << batches << " read on a stream that never waited for its copy";
    }
    StreamGuard on_consumer(consumer);
    auto h = host.next();
    ASSERT_TRUE(h.has_value());
    testing::expect_bitwise_equal(d->images, h->images, "images read on the consumer's stream");
    ++batches;
  }
  EXPECT_EQ(batches, dev.batches_per_epoch());
}

}  // namespace
}  // namespace data
}  // namespace tandem
