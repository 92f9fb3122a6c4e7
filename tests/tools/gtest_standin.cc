// A stand-in for the GPU test binary, run by run_chunks_test through tools/gpu_bundle/run_chunks.py: passing,
// failing, skipped, parameterized, typed and disabled tests, one that hangs, one that crashes, and one that
// passes with a line for --fail-output to catch.
#include <gtest/gtest.h>
#include <unistd.h>

#include <csignal>
#include <cstdio>

namespace {

TEST(Alpha, One) { EXPECT_EQ(1 + 1, 2); }
TEST(Alpha, Two) { EXPECT_EQ(2 * 2, 4); }
TEST(Alpha, Three) { EXPECT_LT(1, 3); }
TEST(Alpha, DISABLED_Never) { FAIL() << "a disabled test ran"; }

TEST(Stall, Hangs) {
  std::printf("the stand-in's hang begins\n");
  std::fflush(stdout);
  for (;;) pause();
}
TEST(Stall, AfterTheHang) { SUCCEED(); }

TEST(Beta, One) { EXPECT_TRUE(true); }
TEST(Beta, Fails) { EXPECT_EQ(1, 2) << "the stand-in's failure"; }
TEST(Beta, Skipped) { GTEST_SKIP() << "the stand-in's skip"; }

class Sizes : public ::testing::TestWithParam<int> {};
TEST_P(Sizes, Positive) { EXPECT_GT(GetParam(), 0); }
INSTANTIATE_TEST_SUITE_P(Small, Sizes, ::testing::Values(1, 2, 3));

template <typename T>
class Typed : public ::testing::Test {};
using Types = ::testing::Types<int, double>;
TYPED_TEST_SUITE(Typed, Types);
TYPED_TEST(Typed, ZeroIsZero) { EXPECT_EQ(TypeParam(0), TypeParam(0)); }

TEST(Gamma, One) { std::printf("the stand-in's report\n"); }
TEST(Gamma, Crashes) {
  std::printf("the stand-in's crash begins\n");
  std::fflush(stdout);
  std::raise(SIGSEGV);
}
TEST(Gamma, AfterTheCrash) { SUCCEED(); }
TEST(Gamma, Last) { SUCCEED(); }

}  // namespace
