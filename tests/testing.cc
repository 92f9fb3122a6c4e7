// Shared test helpers.
#include "tests/testing.h"

#include <atomic>
#include <cstring>
#include <functional>

namespace tandem {
namespace testing {

uint64_t fresh_seed() {
  static std::atomic<uint64_t> counter{0};
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
  return std::hash<std::string>{}(name) * 6364136223846793005ull + (counter++) * 1442695040888963407ull + 1;
}

double max_rel_error(const Tensor& a, const Tensor& b) {
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  double worst = 0;
  for (size_t i = 0; i < va.size() && i < vb.size(); ++i) {
    if (std::isnan(va[i]) != std::isnan(vb[i])) return INFINITY;
    if (std::isnan(va[i])) continue;
    double e = std::abs(va[i] - vb[i]) / std::max(1.0, std::abs(vb[i]));
    worst = std::max(worst, e);
  }
  return worst;
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what) {
  ASSERT_TRUE(a.defined() && b.defined()) << what << ": undefined tensor";
  ASSERT_EQ(a.shape(), b.shape()) << what << ": shapes " << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  double e = max_rel_error(a, b);
  EXPECT_LE(e, tol) << what << ": max relative error " << e;
}

void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  Tensor ha = a.to(Device::cpu()).contiguous(), hb = b.to(Device::cpu()).contiguous();
  EXPECT_EQ(0, std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes())) << what << ": tensors differ bitwise";
}

}  // namespace testing
}  // namespace tandem
