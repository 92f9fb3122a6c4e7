// kernels_run (tests/harness/kernel_record.h): the code runs once whether or not a record is kept (where none is, as
// on a real GPU, a test's results must still be computed), and on the simulated GPU the record names what ran.
#include <gtest/gtest.h>

#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/harness/kernel_record.h"
#include "tests/testing.h"

namespace tandem {
namespace {

TEST(KernelRecord, RunsTheCodeOnceWithOrWithoutARecord) {
  int runs = 0;
  const std::vector<std::string> names = testing::kernels_run([&] { ++runs; });
  EXPECT_EQ(runs, 1);
  EXPECT_TRUE(names.empty()) << "nothing was launched";
}

TEST(KernelRecord, NamesTheKernelsThatRan) {
  TD_REQUIRE_GPU();
  Generator gen(testing::fresh_seed());
  const Tensor x = randn({1000}, gen).to(Device::cuda());
  Tensor y;
  const std::vector<std::string> names = testing::kernels_run([&] { y = relu(x); });
  ASSERT_TRUE(y.defined());
  if (!testing::kernel_record_available()) GTEST_SKIP() << "no record of launches on this GPU";
  ASSERT_EQ(names.size(), 1u);
  EXPECT_EQ(testing::count_containing(names, "unary"), 1) << names[0];
  EXPECT_EQ(testing::count_containing(names, "no such kernel"), 0);
}

}  // namespace
}  // namespace tandem
