// Loader on a CUDA device: pinned host batches copied on the copy stream equal the CPU loader's batches.
#include <gtest/gtest.h>

#include <vector>

#include "data/dataset.h"
#include "data/loader.h"
#include "data/synthetic.h"
#include "runtime/stream.h"
#include "tests/testing.h"

namespace tandem {
namespace data {
namespace {

TEST(LoaderGpu, DeviceBatchesEqualHostBatches) {
  TD_REQUIRE_GPU();
  uint64_t seed = testing::fresh_seed();
  SyntheticOptions so;
  so.size = 100;
  so.seed = seed;
  auto ds = make_synthetic(so, true);
  LoaderOptions o;
  o.batch_size = 16;
  o.seed = seed;
  o.num_workers = 2;
  o.prefetch = 6;
  Loader host(ds, Pipeline::parse("cifar-train"), o);
  o.device = Device::cuda(0);
  Loader dev(ds, Pipeline::parse("cifar-train"), o);
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

}  // namespace
}  // namespace data
}  // namespace tandem
