// The kernel profiler on the CPU and the simulated GPU (host timers): its tables against calls whose ops, kernels
// and bytes are known, nested scopes, the per-op sum against the step it timed, the Chrome trace, a device timer's
// attribution (a fake one) and the error paths.
#include <gtest/gtest.h>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "runtime/base/config.h"
#include "runtime/base/error.h"
#include "runtime/base/files.h"
#include "runtime/formats/chrome_trace.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/profile_table.h"
#include "runtime/tensor/profiler.h"
#include "tests/testing.h"

namespace tandem {
namespace {

std::map<std::string, profiler::Row> by_name(const std::vector<profiler::Row>& rows) {
  std::map<std::string, profiler::Row> m;
  for (const profiler::Row& r : rows) m[r.name] = r;
  return m;
}

// 3 adds and 2 relus inside a scope "block": one binary and one unary kernel each, reading and writing n floats
// per operand (adds: a, b, out; relus: x, out).
void known_calls(Device device) {
  const int64_t n = 1000 + static_cast<int64_t>(testing::fresh_seed() % 1000);
  Generator gen(testing::fresh_seed());
  Tensor a = randn({n}, gen).to(device), b = randn({n}, gen).to(device);
  profiler::start({device}, profiler::Timer::Host);  // on a real GPU too: the kernels' names are the methods
  {
    ProfileScope block("block");
    Tensor c = a;
    for (int i = 0; i < 3; ++i) c = add(c, b);
    for (int i = 0; i < 2; ++i) c = relu(c);
  }
  profiler::Profile p = profiler::stop();
  auto ops = by_name(profiler::op_rows(p));
  auto kernels = by_name(profiler::kernel_rows(p));
  const uint64_t bytes = static_cast<uint64_t>(n) * 4;
  EXPECT_EQ(p.timer, "host timers");
  EXPECT_EQ(ops.size(), 3u) << profiler::format_table(p);
  EXPECT_EQ(ops["add"].count, 3);
  EXPECT_EQ(ops["add"].kernels, 3);
  EXPECT_EQ(ops["add"].bytes, 3 * 3 * bytes);
  EXPECT_EQ(ops["relu"].count, 2);
  EXPECT_EQ(ops["relu"].kernels, 2);
  EXPECT_EQ(ops["relu"].bytes, 2 * 2 * bytes);
  EXPECT_EQ(ops["block"].count, 1);
  EXPECT_EQ(ops["block"].kernels, 0);  // its kernels belong to the ops inside it
  EXPECT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels["binary"].count, 3);
  EXPECT_EQ(kernels["unary"].count, 2);
  for (const profiler::KernelRecord& k : p.kernels) {
    EXPECT_GE(k.start_ns, p.start_ns);
    EXPECT_LE(k.start_ns, k.end_ns);
    EXPECT_LE(k.end_ns, p.end_ns);
  }
}

TEST(Profiler, TablesCountTheKnownOpsKernelsAndBytesOnTheCpu) { known_calls(Device::cpu()); }

TEST(Profiler, TablesCountTheKnownOpsKernelsAndBytesOnTheGpu) {
  TD_REQUIRE_GPU();
  known_calls(Device::cuda(0));
}

// One training step of a small convolutional network: two conv -> batch norm -> relu blocks, pooling, a linear
// layer, log-softmax, backward and an SGD step. `width` channels: enough work in the kernels that the host's
// own (autograd, allocation, the tests' fill of fresh memory) stays under 5% of the step.
struct Net {
  std::vector<Tensor> params;
  Tensor x;

  Net(Device device, int64_t width, Generator& gen) {
    auto param = [&](Shape s, double scale) {
      params.push_back(mul(randn(s, gen), scale).to(device).set_requires_grad());
    };
    param({width, 16, 3, 3}, 0.1);
    param({width}, 1.0);
    param({width}, 0.1);
    param({width, width, 3, 3}, 0.05);
    param({width}, 1.0);
    param({width}, 0.1);
    param({10, width}, 0.1);
    x = randn({8, 16, 32, 32}, gen).to(device);
  }

  void step() {
    Conv2dOptions same;
    same.pad_h = same.pad_w = 1;
    Tensor h = x;
    for (int i = 0; i < 2; ++i) {
      h = conv2d(h, params[3 * i], Tensor(), same);
      h = relu(batch_norm(h, params[3 * i + 1], params[3 * i + 2], Tensor(), Tensor(), true, 0.1, 1e-5));
    }
    Tensor loss = mean(log_softmax(linear(global_avg_pool2d(h), params[6]), 1));
    loss.backward();
    std::vector<Tensor> grads;
    for (Tensor& p : params) grads.push_back(p.grad());
    SgdHyper h_sgd;
    h_sgd.lr = 0.01;
    sgd_step_(params, grads, {}, h_sgd);
    for (Tensor& p : params) p.zero_grad();
  }
};

// The per-op sum against the step on up to 3 profiled steps: on a shared machine another process can take the
// core between two kernels of one step (a lost kernel or one counted twice fails every try). The tests' fill of
// fresh host memory (TANDEM_FILL_FRESH, a memset per allocation that programs do not pay, slower still under
// ASan) is off while they run.
void op_sum_matches_the_step(Device device, int64_t width) {
  Generator gen(testing::fresh_seed());
  Net net(device, width, gen);
  net.step();  // first calls: algorithm choices, allocator pools
  const bool fill_fresh = fill_fresh_host_memory();
  set_fill_fresh_host_memory(false);
  profiler::Profile p;
  double op_ms = 0;
  for (int attempt = 0; attempt < 3; ++attempt) {
    profiler::start({device}, profiler::Timer::Host);
    net.step();
    p = profiler::stop();
    op_ms = 0;
    for (const profiler::Row& r : profiler::op_rows(p)) op_ms += r.ms;
    const std::string table = profiler::format_table(p);
    std::printf("%s", table.substr(0, table.find('\n') + 1).c_str());  // the margin, for the log
    if (std::abs(op_ms - p.ms()) <= 0.05 * p.ms()) break;
  }
  set_fill_fresh_host_memory(fill_fresh);
  EXPECT_NEAR(op_ms, p.ms(), 0.05 * p.ms()) << profiler::format_table(p);
  auto ops = by_name(profiler::op_rows(p));
  EXPECT_EQ(ops["conv2d"].count, 2);
  EXPECT_EQ(ops["batch_norm"].count, 2);
  EXPECT_EQ(ops["relu"].count, 2);
  EXPECT_EQ(ops["conv2d backward"].count, 2);
  EXPECT_EQ(ops["batch_norm backward"].count, 2);
  EXPECT_EQ(ops["sgd_step"].count, 1);
  EXPECT_GE(ops["conv2d"].kernels, 2);
  EXPECT_GT(ops["conv2d backward"].ms, 0);
}

TEST(Profiler, PerOpSumIsWithinFivePercentOfTheStepOnTheCpu) { op_sum_matches_the_step(Device::cpu(), 192); }

TEST(Profiler, PerOpSumIsWithinFivePercentOfTheStepOnTheGpu) {
  TD_REQUIRE_GPU();
  op_sum_matches_the_step(Device::cuda(0), 16);  // a simulated GPU's kernels are slow
}

TEST(Profiler, NestedScopesOwnTheKernelsCalledDirectlyInThem) {
  Tensor a = ones({64}), b = ones({64});
  profiler::start({Device::cpu()});
  {
    ProfileScope outer("outer");
    {
      ProfileScope inner("inner");
      ProfileScope innermost("innermost");
    }
    a.fill_(2.0);
    add(a, b);
  }
  profiler::Profile p = profiler::stop();
  ASSERT_EQ(p.scopes.size(), 4u);
  std::map<std::string, int> depth;
  for (const profiler::ScopeRecord& s : p.scopes) depth[s.name] = s.depth;
  EXPECT_EQ(depth["outer"], 0);
  EXPECT_EQ(depth["inner"], 1);
  EXPECT_EQ(depth["innermost"], 2);
  EXPECT_EQ(depth["add"], 1);
  auto ops = by_name(profiler::op_rows(p));
  EXPECT_EQ(ops["outer"].kernels, 1);  // the fill
  EXPECT_EQ(ops["add"].kernels, 1);
  EXPECT_EQ(ops["inner"].kernels, 0);
  EXPECT_EQ(ops["innermost"].count, 1);
}

TEST(Profiler, KernelsOutsideEveryScopeAndNothingOutsideTheProfile) {
  Tensor a = ones({64});
  a.fill_(1.0);  // before: not recorded
  ProfileScope before("opened before the profile");
  profiler::start({Device::cpu()});
  a.fill_(2.0);
  profiler::Profile p = profiler::stop();
  a.fill_(3.0);  // after: not recorded
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.kernels[0].op, profiler::kNoOp);
  EXPECT_EQ(p.kernels[0].bytes, 64u * 4);
  EXPECT_TRUE(p.scopes.empty());
}

TEST(Profiler, TheChromeTraceHoldsEveryScopeAndKernel) {
  Tensor a = ones({256}), b = ones({256});
  profiler::start({Device::cpu()});
  {
    ProfileScope block("block");
    relu(add(a, b));
  }
  profiler::Profile p = profiler::stop();
  const std::string path = ::testing::TempDir() + "/profiler_test_trace.json";
  write_chrome_trace(p, path);
  Json trace = parse_json(read_text(path));
  std::map<std::string, std::string> category;  // event name -> "op" or "kernel"
  std::map<std::string, std::string> op_of;     // kernel -> its op
  for (const Json& e : json_array(json_at(trace, "traceEvents"), "traceEvents")) {
    if (json_string(json_at(e, "ph"), "ph") != "X") continue;
    const std::string name = json_string(json_at(e, "name"), "name");
    category[name] = json_string(json_at(e, "cat"), "cat");
    EXPECT_GE(json_number(json_at(e, "ts"), "ts"), 0);
    EXPECT_GE(json_number(json_at(e, "dur"), "dur"), 0);
    if (category[name] == "kernel") op_of[name] = json_string(json_at(json_at(e, "args"), "op"), "op");
  }
  EXPECT_EQ(category, (std::map<std::string, std::string>{
                          {"block", "op"}, {"add", "op"}, {"relu", "op"}, {"binary", "kernel"}, {"unary", "kernel"}}));
  EXPECT_EQ(op_of["binary"], "add");
  EXPECT_EQ(op_of["unary"], "relu");
}

TEST(Profiler, ATracePathThatCannotBeWrittenThrowsIoError) {
  const std::string file = ::testing::TempDir() + "/profiler_test_plain_file";
  write_text(file, "not a folder");
  profiler::start({Device::cpu()});
  profiler::Profile p = profiler::stop();
  std::string what;
  EXPECT_TRUE(testing::throws_error<IoError>([&] { write_chrome_trace(p, file + "/trace.json"); }, &what));
  EXPECT_NE(what.find("trace.json"), std::string::npos) << what;
}

TEST(Profiler, StartingTwiceOrStoppingWithoutAStartThrows) {
  std::string what;
  EXPECT_TRUE(testing::throws_error<ValueError>([] { profiler::stop(); }, &what));
  profiler::start({Device::cpu()});
  EXPECT_TRUE(testing::throws_error<ValueError>([] { profiler::start({Device::cpu()}); }, &what));
  EXPECT_NE(what.find("already"), std::string::npos) << what;
  profiler::stop();
}

// A device timer for the CPU, standing in for CUPTI: each call launches two kernels (a "main" and a "tail"), and
// one kernel ran outside every call.
class FakeTimer final : public profiler::DeviceTimer {
 public:
  const char* name() const override { return "fake timer"; }
  void begin_call(uint64_t call) override { current_ = call; }
  void end_call() override {
    const int64_t t = 10 * static_cast<int64_t>(current_);
    kernels_.push_back({"main", current_, t, t + 4, 7});
    kernels_.push_back({"tail", current_, t + 4, t + 5, 7});
    current_ = 0;
  }
  std::vector<profiler::DeviceKernel> finish() override {
    kernels_.push_back({"stray", 0, 1, 2, 7});
    return kernels_;
  }

 private:
  uint64_t current_ = 0;
  std::vector<profiler::DeviceKernel> kernels_;
};

std::unique_ptr<profiler::DeviceTimer> working_timer(Device, std::string*) { return std::make_unique<FakeTimer>(); }
std::unique_ptr<profiler::DeviceTimer> missing_timer(Device, std::string* why_not) {
  *why_not = "libcupti.so could not be loaded";
  return nullptr;
}

TEST(Profiler, ADeviceTimersKernelsBelongToTheCallsThatLaunchedThem) {
  profiler::register_device_timer(DeviceType::CPU, working_timer);
  Tensor a = ones({100}), b = ones({100});
  profiler::start({Device::cpu()});
  add(a, b);
  relu(a);
  profiler::Profile p = profiler::stop();
  profiler::start({Device::cpu()}, profiler::Timer::Host);
  relu(a);
  EXPECT_EQ(profiler::stop().timer, "host timers");
  profiler::register_device_timer(DeviceType::CPU, nullptr);
  EXPECT_EQ(p.timer, "fake timer");
  auto ops = by_name(profiler::op_rows(p));
  EXPECT_EQ(ops["add"].kernels, 2);
  EXPECT_EQ(ops["add"].bytes, 3u * 100 * 4);  // given once, with the call's first kernel
  EXPECT_EQ(ops["relu"].kernels, 2);
  EXPECT_EQ(ops[profiler::kNoOp].kernels, 1);
  auto kernels = by_name(profiler::kernel_rows(p));
  EXPECT_EQ(kernels["main"].count, 2);
  EXPECT_NEAR(kernels["main"].ms, 8e-6, 1e-12);
  EXPECT_EQ(kernels["tail"].bytes, 0u);
}

TEST(Profiler, AMissingDeviceTimerSaysWhyOnOneLineAndHostTimersTimeTheKernels) {
  profiler::register_device_timer(DeviceType::CPU, missing_timer);
  Tensor a = ones({100});
  ::testing::internal::CaptureStderr();
  profiler::start({Device::cpu()});
  relu(a);
  profiler::Profile p = profiler::stop();
  const std::string err = ::testing::internal::GetCapturedStderr();
  profiler::register_device_timer(DeviceType::CPU, nullptr);
  EXPECT_EQ(err, "tandem: profiler: libcupti.so could not be loaded; timing kernels with host timers\n");
  EXPECT_EQ(p.timer, "host timers");
  ASSERT_EQ(p.kernels.size(), 1u);
  EXPECT_EQ(p.kernels[0].name, "unary");
}

}  // namespace
}  // namespace tandem
