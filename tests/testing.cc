// Shared test helpers.
#include "tests/testing.h"

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <string>

#include "runtime/base/config.h"
#include "runtime/memory/stream_check.h"
#include "runtime/tensor/ops.h"

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

bool sanitizer_run() {
  const char* v = std::getenv("TANDEM_SANITIZED");
  return v != nullptr && std::string(v) == "1";
}

uint64_t fresh_seed() {
  static std::atomic<uint64_t> counter{0};
  const ::testing::TestInfo* info = ::testing::UnitTest::GetInstance()->current_test_info();
  std::string name = info ? std::string(info->test_suite_name()) + "." + info->name() : "none";
  uint64_t seed = (std::hash<std::string>{}(name) ^ base_seed()) * 6364136223846793005ull +
                  (counter++) * 1442695040888963407ull + 1;
  return seed;
}

namespace {
double largest_finite(const std::vector<double>& v) {
  double m = 0;
  for (double x : v)
    if (std::isfinite(x)) m = std::max(m, std::abs(x));
  return m;
}
}  // namespace

Discrepancy compare_values(const std::vector<double>& got, const std::vector<double>& want, double scale) {
  if (got.size() != want.size()) return {INFINITY, 0};
  if (scale <= 0) scale = largest_finite(want);
  Discrepancy d;
  for (size_t i = 0; i < got.size(); ++i) {
    double e;
    if (!std::isfinite(want[i]) || !std::isfinite(got[i])) {
      const bool same = std::isnan(want[i]) ? std::isnan(got[i]) : got[i] == want[i];
      e = same ? 0.0 : INFINITY;
    } else if (got[i] == want[i]) {
      e = 0.0;
    } else {
      e = scale > 0 ? std::abs(got[i] - want[i]) / scale : INFINITY;
    }
    if (e > d.error) d = {e, i};
  }
  return d;
}

double max_magnitude(const Tensor& t) { return largest_finite(t.to_vector<double>()); }

double max_rel_error(const Tensor& a, const Tensor& b, double scale) {
  return compare_values(a.to_vector<double>(), b.to_vector<double>(), scale).error;
}

void expect_close(const Tensor& a, const Tensor& b, double tol, const std::string& what, double scale) {
  ASSERT_TRUE(a.defined() && b.defined()) << what << ": undefined tensor";
  ASSERT_EQ(a.shape(), b.shape()) << what << ": shapes " << shape_str(a.shape()) << " vs " << shape_str(b.shape());
  std::vector<double> va = a.to_vector<double>(), vb = b.to_vector<double>();
  Discrepancy d = compare_values(va, vb, scale);
  EXPECT_LE(d.error, tol) << what << ": relative error " << d.error << " at element " << d.at << " ("
                          << (d.at < va.size() ? va[d.at] : NAN) << ", expected " << (d.at < vb.size() ? vb[d.at] : NAN)
                          << ")";
}

void expect_bitwise_equal(const Tensor& a, const Tensor& b, const std::string& what) {
  ASSERT_EQ(a.dtype(), b.dtype()) << what;
  ASSERT_EQ(a.shape(), b.shape()) << what;
  Tensor ha = a.to(Device::cpu()).contiguous(), hb = b.to(Device::cpu()).contiguous();
  EXPECT_EQ(0, std::memcmp(ha.raw_data(), hb.raw_data(), ha.nbytes())) << what << ": tensors differ bitwise";
}

Tensor random_bf16(const Shape& shape, Generator& gen, Device device, bool positive) {
  int64_t n = 1;
  for (int64_t d : shape) n *= d;
  std::vector<float> v(static_cast<size_t>(n));
  for (float& e : v) {
    e = static_cast<float>(0.25 + 3.75 * gen.uniform());
    if (!positive && gen.uniform() < 0.5) e = -e;
  }
  return from_vector(v, shape).to(DType::BF16).to(device);
}

double bf16_step(double v) { return std::ldexp(1.0, std::ilogb(v) - 7); }

Tensor bf16_rounded(const Tensor& t) { return t.to(DType::F32).to(DType::BF16); }

Tensor f32_accumulation_slack(const Tensor& magnitude_sums) { return mul(magnitude_sums, 1.0 / (1 << 16)); }

Tensor bf16_steps(const Tensor& t) {
  std::vector<double> v = t.to(Device::cpu()).to(DType::F64).contiguous().to_vector<double>();
  for (double& e : v) e = e == 0 ? 0 : bf16_step(e);
  return from_vector(v, t.shape());
}

void expect_bf16_near(const Tensor& got_t, const Tensor& want_t, int steps, const Tensor& slack_t,
                      const std::string& what) {
  ASSERT_EQ(got_t.dtype(), DType::BF16) << what;
  ASSERT_EQ(got_t.shape(), want_t.shape()) << what;
  auto host = [](const Tensor& t) { return t.to(Device::cpu()).to(DType::F64).contiguous().to_vector<double>(); };
  const std::vector<double> got = host(got_t), want = host(want_t);
  const std::vector<double> slack = slack_t.defined() ? host(slack_t) : std::vector<double>(got.size(), 0.0);
  int off = 0;
  for (size_t i = 0; i < got.size(); ++i) {
    const double tol = (want[i] == 0 ? 0.0 : steps * bf16_step(want[i])) + slack[i];
    if (!(std::fabs(got[i] - want[i]) <= tol) && off++ < 5)
      ADD_FAILURE() << what << " [" << i << "]: " << got[i] << " vs " << want[i] << " (within " << tol << ")";
  }
}

NumericsGuard::NumericsGuard(bool tf32, bool deterministic_mode)
    : tf32_(allow_tf32()), deterministic_(deterministic()) {
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
