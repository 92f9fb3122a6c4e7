// Pipe-BD's profile and timed runs leave out first-call costs. On an H200 the first call of each convolution shape
// and pass ran cuDNN's algorithm search, and the profile that fed the AHD planner came out 29 times the real step.
// Here the NN backend of the workers' device is wrapped so that the first call of each kind of convolution (pass,
// depthwise or not) sleeps `delay`, as a GPU's first use of a convolution kernel (loading it,
// choosing it) costs: a profile entry, or an instruction of a timed run, that included a first call would take at
// least that. (Kinds rather than every shape: the NAS workload has hundreds of shapes, and sleeping at each first
// call made the test minutes long; kinds by kernel size and rows as well still took over three minutes on the
// simulated GPU, where the delay must be 5 s.) On CPU workers and on SM partitions of a GPU (the simulated one in CI).
#include <gtest/gtest.h>

#include <chrono>
#include <mutex>
#include <set>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include "parallel/bd/profiler.h"
#include "parallel/bd/strategy.h"
#include "parallel/communicator.h"
#include "parallel/worker.h"
#include "runtime/nn/nn_backend.h"
#include "tests/bd/distill_testing.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace bd {
namespace {

// The NN kernels of a device type with the first call of each kind of convolution made `delay_s` slower,
// in place of the registered ones while it lives.
class SlowFirstConvolutions final : public NNBackend {
 public:
  SlowFirstConvolutions(Device device, double delay_s)
      : type_(device.type), delay_s_(delay_s), k_(registered_nn_backend(device.type)) {
    register_nn_backend(type_, this);  // the registry wraps this object in turn while the stream checker runs
  }
  ~SlowFirstConvolutions() override { register_nn_backend(type_, k_); }
  SlowFirstConvolutions(const SlowFirstConvolutions&) = delete;
  SlowFirstConvolutions& operator=(const SlowFirstConvolutions&) = delete;

  // The first calls seen so far (each slept).
  size_t first_calls() {
    std::lock_guard<std::mutex> lock(mu_);
    return seen_.size();
  }

#define TD_FORWARD(method, Args)                            \
  void method(const Args& args, const Stream& s) override { \
    first_call(args);                                       \
    k_->method(args, s);                                    \
  }
  TD_NN_BACKEND_METHODS(TD_FORWARD)
#undef TD_FORWARD

 private:
  template <class Args>
  void first_call(const Args&) {}
  void first_call(const Conv2dForwardArgs& a) { first_call(0, a.g); }
  void first_call(const Conv2dBackwardDataArgs& a) { first_call(1, a.g); }
  void first_call(const Conv2dBackwardWeightArgs& a) { first_call(2, a.g); }
  void first_call(int pass, const Conv2dGeometry& g) {
    {
      std::lock_guard<std::mutex> lock(mu_);
      const bool depthwise = g.groups > 1 && g.groups == g.c;
      if (!seen_.insert({pass, depthwise}).second) return;
    }
    std::this_thread::sleep_for(std::chrono::duration<double>(delay_s_));
  }

  DeviceType type_;
  double delay_s_;
  NNBackend* k_ = nullptr;
  std::mutex mu_;
  std::set<std::pair<int, bool>> seen_;  // pass, depthwise
};

struct Case {
  const char* workers;  // make_workers spec of 2 workers
  bool gpu;
};

class WarmUp : public ::testing::TestWithParam<Case> {
 protected:
  void SetUp() override {
    if (GetParam().gpu && !cuda_available()) GTEST_SKIP() << "no CUDA GPU: " << cuda_unavailable_reason();
    workers_ = make_workers(GetParam().workers);
  }
  // Far above what a profile entry or an instruction takes without a first call on the workers, at batch 4 (batch 8
  // took at most 0.03 s on CPU workers, 1.7 s on the simulated GPU and 4.8 s there under ASan on a loaded machine,
  // measured); a first call adds at least the delay to what includes it.
  double delay_s() const { return workers_[0].device.is_cuda() && cuda_simulated() ? 6.0 : 0.5; }
  double limit_s() const { return 0.8 * delay_s(); }
  std::vector<Worker> workers_;
};

// No warm-up runs of the measured functions themselves (ProfileOptions::warmup = 0) and one trial: only the
// profiler's run of every shape beforehand, each supernet path included, keeps the first calls out. One replica
// factor (g = 1), so that rank 0 measures alone.
TEST_P(WarmUp, TheProfileLeavesOutTheFirstCallOfEveryConvolution) {
  const uint64_t seed = tandem::testing::fresh_seed();
  Workload w(testing::nas_workload(seed));
  RunContext ctx = testing::make_context(w, seed, 8, 4, 1);
  ProfileOptions o;
  o.warmup = 0;
  o.trials = 1;
  o.max_replicas = 1;
  auto comms = make_local_group(workers_);
  SlowFirstConvolutions slow(workers_[0].device, delay_s());
  BlockProfile p;
  run_on_workers(workers_, [&](Worker& wk) {
    BlockProfile mine = profile_blocks(ctx, o, wk, *comms[wk.rank]);
    if (wk.rank == 0) p = mine;
  });
  EXPECT_GT(slow.first_calls(), 0u) << "no convolution was slowed: the test checks nothing";
  ASSERT_EQ(p.max_replicas(), 1);
  for (int b = 0; b < p.blocks(); ++b) {
    EXPECT_LT(p.teacher_s[0][b], limit_s()) << "teacher block " << b;
    EXPECT_LT(p.student_s[0][b], limit_s()) << "student block " << b;
  }
}

// DP trains every block on both workers, each on its shapes for the first time in this run.
TEST_P(WarmUp, ATimedRunLeavesOutTheFirstCallOfEveryConvolution) {
  const uint64_t seed = tandem::testing::fresh_seed();
  Workload w(testing::nas_workload(seed));
  RunContext ctx = testing::make_context(w, seed, 8, 4, 1);
  SlowFirstConvolutions slow(workers_[0].device, delay_s());
  StrategyResult r;
  testing::run_in_process(ctx, dp_layout(w.blocks(), 2), &r, MessageMatching::ByTag, GetParam().workers);
  EXPECT_GT(slow.first_calls(), 0u) << "no convolution was slowed: the test checks nothing";
  ASSERT_FALSE(r.times.empty());
  for (const InstrTime& t : r.times)
    EXPECT_LT(t.end_s - t.start_s, limit_s()) << r.schedule.schedule.describe(t.id) << " of " << r.layout;
}

INSTANTIATE_TEST_SUITE_P(Workers, WarmUp, ::testing::Values(Case{"cpu:2", false}, Case{"cuda:0/2", true}),
                         [](const ::testing::TestParamInfo<Case>& info) {
                           return std::string(info.param.gpu ? "gpu_partitions" : "cpu");
                         });

}  // namespace
}  // namespace bd
}  // namespace parallel
}  // namespace tandem
