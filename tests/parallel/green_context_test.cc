// Tests of SM partitions (parallel/green_context.h): how a GPU's SMs are split into green contexts, and the
// plain-stream fallback when they cannot be. Each case skips without a GPU.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "parallel/green_context.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace {

// The SMs each of `count` equal green contexts gets on a `total`-SM device of compute capability 9.0, from
// cuDevSmResourceSplitByCount's documented granularity there: groups of a multiple of 8 SMs keep the SMs
// that are co-scheduled together (and are preferred); ignoring co-scheduling, groups are a multiple of 2.
// 0 when no equal split into `count` groups exists.
int expected_partition_sms(int total, int count) {
  for (int step : {8, 2})
    for (int sms = total / count / step * step; sms >= step; sms -= step)
      if (sms * count <= total) return sms;
  return 0;
}

TEST(GreenContextSplit, EqualPartitionsOfTheSimulatedGpu) {
  TD_REQUIRE_GPU();
  const Device dev = Device::cuda(0);
  const int total = device_sm_count(dev);
  for (int count : {1, 2, 3, 4, 5, 6, 9, 16, 32}) {
    if (count > total) continue;
    std::vector<SmPartition> parts = make_sm_partitions(dev, count);
    ASSERT_EQ(parts.size(), static_cast<size_t>(count));
    const std::string what = std::to_string(total) + " SMs into " + std::to_string(count);
    for (const SmPartition& p : parts) {
      EXPECT_EQ(p.compute.device(), dev) << what;
      EXPECT_EQ(p.comm.device(), dev) << what;
      EXPECT_EQ(p.green_context, parts[0].green_context) << what << ": every partition or none is green";
      EXPECT_EQ(p.sm_count, parts[0].sm_count) << what << ": equal shares";
    }
    if (parts[0].green_context)
      EXPECT_LE(parts[0].sm_count * count, total) << what << ": disjoint shares";
    else
      EXPECT_EQ(parts[0].sm_count, total) << what << ": plain streams share every SM";
    // The exact shares are known for the simulated GPU's 32 SMs at cc 9.0 granularity.
    if (!cuda_simulated() || total != 32) continue;
    const int want = expected_partition_sms(total, count);
    if (want == 0) {
      EXPECT_FALSE(parts[0].green_context) << what << ": no equal split exists, plain streams expected";
    } else {
      EXPECT_TRUE(parts[0].green_context) << what << ": a split of " << want << " SMs each exists";
      EXPECT_EQ(parts[0].sm_count, want) << what;
    }
  }
}

// What make_sm_partitions probes on a green-context stream before handing it out: cuDNN and cuBLAS bind their
// handles to the stream and run there. Each partition's streams compute a convolution and a GEMM of random
// inputs as the CPU does (TF32 may round the products).
TEST(GreenContextProbe, CudnnAndCublasRunOnEveryPartitionStream) {
  TD_REQUIRE_GPU();
  const Device dev = Device::cuda(0);
  Generator gen(tandem::testing::fresh_seed());
  const Tensor x = randn({2, 3, 7, 6}, gen), w = randn({4, 3, 3, 3}, gen), a = randn({5, 9}, gen),
               b = randn({9, 7}, gen);
  Conv2dOptions o;
  o.pad_h = o.pad_w = 1;
  const Tensor conv_ref = conv2d(x, w, Tensor(), o), gemm_ref = matmul(a, b);
  std::vector<SmPartition> parts = make_sm_partitions(dev, 2);
  for (const SmPartition& p : parts) {
    EXPECT_TRUE(p.green_context || !cuda_simulated()) << "the simulated GPU has green contexts";
    for (const Stream& s : {p.compute, p.comm}) {
      StreamGuard guard(s);
      tandem::testing::expect_close(conv2d(x.to(dev), w.to(dev), Tensor(), o), conv_ref, 1e-2, "conv2d");
      tandem::testing::expect_close(matmul(a.to(dev), b.to(dev)), gemm_ref, 1e-2, "matmul");
    }
  }
}

}  // namespace
}  // namespace parallel
}  // namespace tandem
