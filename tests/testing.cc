// Shared test helpers.
#include "tests/testing.h"

#include <atomic>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <cstring>
#include <functional>

#include "runtime/config.h"
#include "runtime/stream_check.h"

namespace tandem {
namespace testing {

namespace {
// One base seed per test process: random unless TANDEM_TEST_SEED fixes it, printed so a failure can be
// reproduced with the same inputs.
uint64_t base_seed() {
  static const uint64_t seed = [] {
    uint64_t s;
    if (const char* v = std::getenv("TANDEM_TEST_SEED")) {
      s = std::strtoull(v, nullptr, 0);
    } else {
      std::random_device rd;
      s = (static_cast<uint64_t>(rd()) << 32) ^ rd();
    }
    std::printf("[tandem] test inputs drawn with TANDEM_TEST_SEED=%llu\n", static_cast<unsigned long long>(s));
    return s;
  }();
  return seed;
}
}  // namespace

uint64_t fresh_seed() {
  static std::atomic<uint64_t> counter{0};
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
  uint64_t seed = (std::hash<std::string>{}(name) ^ base_seed()) * 6364136223846793005ull +
                  (counter++) * 1442695040888963407ull + 1;
  return seed;
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

NumericsGuard::NumericsGuard(bool tf32, bool deterministic_mode) : tf32_(allow_tf32()), deterministic_(deterministic()) {
  set_allow_tf32(tf32);
  set_deterministic(deterministic_mode);
}
NumericsGuard::~NumericsGuard() {
  set_allow_tf32(tf32_);
  set_deterministic(deterministic_);
}

StreamCheckOn::StreamCheckOn() { stream_check::set_enabled(true); }
StreamCheckOn::~StreamCheckOn() { stream_check::set_enabled(false); }

}  // namespace testing
}  // namespace tandem
