// Optimizers against plain double-precision loops of PyTorch's formulas (groups, skipped parameters, state
// round trips), and the learning-rate schedules.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <memory>

#include "runtime/base/error.h"
#include "runtime/memory/memory.h"
#include "runtime/optim/lr_schedule.h"
#include "runtime/optim/optim.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace optim {
namespace {

using tandem::testing::fresh_seed;

struct RefParam {
  std::vector<double> p, buf, m, v;
  int64_t step = 0;
};

// Two groups: {a, b} with the optimizer's lr/wd, {c} with its own. Gradients are fresh each step; `b` gets
// none on step 1 (it must be skipped: no decay, no state).
struct Fixture {
  Tensor a, b, c;
  std::vector<ParamGroup> groups;
  explicit Fixture(Generator& gen) {
    a = randn({3, 2}, gen, DType::F64).set_requires_grad(true);
    b = randn({4}, gen, DType::F64).set_requires_grad(true);
    c = randn({2, 2}, gen, DType::F64).set_requires_grad(true);
    ParamGroup g0, g1;
    g0.params = {{"a", a}, {"b", b}};
    g1.params = {{"c", c}};
    g1.lr = 0.03;
    g1.weight_decay = 0.2;
    groups = {g0, g1};
  }
  std::vector<Tensor> params() const { return {a, b, c}; }
};

void set_grads(const Fixture& f, Generator& gen, int step) {
  for (int i = 0; i < 3; ++i) {
    Tensor p = f.params()[i];
    if (i == 1 && step == 1) {
      p.zero_grad();
      continue;
    }
    p.set_grad(randn(p.shape(), gen, DType::F64));
  }
}

void expect_params(const Fixture& f, const std::vector<RefParam>& ref, const std::string& what) {
  for (int i = 0; i < 3; ++i) {
    auto got = f.params()[i].to_vector<double>();
    for (size_t j = 0; j < got.size(); ++j) EXPECT_NEAR(got[j], ref[i].p[j], 1e-12) << what << " param " << i;
  }
}

void run_sgd_case(const SgdOptions& o) {
  Generator gen(fresh_seed()), grads(fresh_seed());
  Fixture f(gen);
  std::vector<RefParam> ref(3);
  for (int i = 0; i < 3; ++i) ref[i].p = f.params()[i].to_vector<double>();
  Sgd sgd(f.groups, o);
  for (int step = 0; step < 5; ++step) {
    set_grads(f, grads, step);
    if (step == 3) sgd.set_lr(0, o.lr * 0.5);  // as a schedule would
    for (int i = 0; i < 3; ++i) {
      Tensor g = f.params()[i].grad();
      if (!g.defined()) continue;
      auto gv = g.to_vector<double>();
      double lr = i == 2 ? 0.03 : (step >= 3 ? o.lr * 0.5 : o.lr), wd = i == 2 ? 0.2 : o.weight_decay;
      RefParam& r = ref[i];
      bool first = r.buf.empty();
      if (first) r.buf.resize(gv.size());
      for (size_t j = 0; j < gv.size(); ++j) {
        double d = gv[j] + wd * r.p[j];
        if (o.momentum != 0) {
          r.buf[j] = first ? d : o.momentum * r.buf[j] + (1 - o.dampening) * d;
          d = o.nesterov ? d + o.momentum * r.buf[j] : r.buf[j];
        }
        r.p[j] -= lr * d;
      }
    }
    sgd.step();
    expect_params(f, ref, "SGD step " + std::to_string(step));
  }
  size_t with_state = o.momentum != 0 ? 3 : 0;
  EXPECT_EQ(sgd.state_dict().size(), with_state);
}

TEST(Sgd, MatchesPyTorchFormulas) {
  SgdOptions plain;
  plain.lr = 0.1;
  run_sgd_case(plain);
  SgdOptions momentum = plain;
  momentum.momentum = 0.9;
  momentum.weight_decay = 1e-2;
  momentum.dampening = 0.1;
  run_sgd_case(momentum);
  SgdOptions nesterov = plain;
  nesterov.momentum = 0.8;
  nesterov.nesterov = true;
  nesterov.weight_decay = 5e-4;
  run_sgd_case(nesterov);
}

void run_adam_case(const AdamOptions& o) {
  Generator gen(fresh_seed()), grads(fresh_seed());
  Fixture f(gen);
  std::vector<RefParam> ref(3);
  for (int i = 0; i < 3; ++i) ref[i].p = f.params()[i].to_vector<double>();
  Adam adam(f.groups, o);
  for (int step = 0; step < 5; ++step) {
    set_grads(f, grads, step);
    for (int i = 0; i < 3; ++i) {
      Tensor g = f.params()[i].grad();
      if (!g.defined()) continue;
      auto gv = g.to_vector<double>();
      double lr = i == 2 ? 0.03 : o.lr, wd = i == 2 ? 0.2 : o.weight_decay;
      RefParam& r = ref[i];
      if (r.m.empty()) r.m.assign(gv.size(), 0.0), r.v.assign(gv.size(), 0.0);
      ++r.step;
      double bc1 = 1 - std::pow(o.beta1, r.step), bc2 = 1 - std::pow(o.beta2, r.step);
      for (size_t j = 0; j < gv.size(); ++j) {
        double gj = gv[j];
        if (o.decoupled_weight_decay)
          r.p[j] *= 1 - lr * wd;
        else
          gj += wd * r.p[j];
        r.m[j] = o.beta1 * r.m[j] + (1 - o.beta1) * gj;
        r.v[j] = o.beta2 * r.v[j] + (1 - o.beta2) * gj * gj;
        r.p[j] -= lr / bc1 * r.m[j] / (std::sqrt(r.v[j]) / std::sqrt(bc2) + o.eps);
      }
    }
    adam.step();
    expect_params(f, ref, adam.name() + " step " + std::to_string(step));
  }
  // b skipped one step: its step count is one lower.
  NamedTensors st = adam.state_dict();
  ASSERT_EQ(st.size(), 9u);
  EXPECT_EQ(st[2].first, "a.step");
  EXPECT_EQ(st[2].second.item<int64_t>(), 5);
  EXPECT_EQ(st[5].first, "b.step");
  EXPECT_EQ(st[5].second.item<int64_t>(), 4);
}

TEST(Adam, MatchesPyTorchFormulas) {
  AdamOptions o;
  o.lr = 0.01;
  o.weight_decay = 0.05;
  run_adam_case(o);
  AdamOptions w = adamw_options(0.02);
  EXPECT_EQ(w.weight_decay, 0.01);
  run_adam_case(w);
  AdamOptions betas;
  betas.beta1 = 0.0;  // ProxylessNAS's architecture optimizer
  betas.beta2 = 0.999;
  run_adam_case(betas);
}

// Training continued from a restored state matches training continued in place, bit for bit.
template <typename Opt, typename Options>
void check_state_round_trip(const Options& o) {
  Generator gen(fresh_seed());
  Fixture f(gen), g(gen);
  for (int i = 0; i < 3; ++i) {
    autograd::NoGradGuard ng;
    Tensor(g.params()[i]).copy_(f.params()[i]);
  }
  Opt a(f.groups, o);
  uint64_t seed = fresh_seed();
  Generator ga(seed);
  for (int step = 0; step < 3; ++step) {
    set_grads(f, ga, step);
    a.step();
  }
  for (int i = 0; i < 3; ++i) {
    autograd::NoGradGuard ng;
    Tensor(g.params()[i]).copy_(f.params()[i]);
  }
  Opt b(g.groups, o);
  b.load_state_dict(a.state_dict());
  Generator gb = ga;
  for (int step = 3; step < 6; ++step) {
    set_grads(f, ga, step);
    set_grads(g, gb, step);
    a.step();
    b.step();
  }
  for (int i = 0; i < 3; ++i) tandem::testing::expect_bitwise_equal(f.params()[i], g.params()[i], "param");
}

TEST(Optimizers, StateRoundTripsBitwise) {
  SgdOptions s;
  s.momentum = 0.9;
  s.nesterov = true;
  check_state_round_trip<Sgd>(s);
  check_state_round_trip<Adam>(adamw_options(0.01));
}

TEST(Optimizers, StateIsChargedToOptimizerState) {
  Generator gen(fresh_seed());
  Fixture f(gen);
  int64_t before = memory_counters(Device::cpu()).cur(MemoryCategory::OptimizerState);
  Adam adam(f.groups, AdamOptions{});
  EXPECT_EQ(adam.planned_state_bytes(), 2 * (6 + 4 + 4) * 8);
  set_grads(f, gen, 0);
  adam.step();
  EXPECT_EQ(memory_counters(Device::cpu()).cur(MemoryCategory::OptimizerState) - before, adam.planned_state_bytes());
  SgdOptions so;
  EXPECT_EQ(Sgd(f.groups, so).planned_state_bytes(), 0);
}

TEST(Optimizers, RefusesBadInput) {
  Generator gen(fresh_seed());
  Fixture f(gen);
  SgdOptions o;
  o.nesterov = true;
  EXPECT_THROW(Sgd(f.groups, o), ValueError);
  o = SgdOptions();
  o.lr = -1;
  EXPECT_THROW(Sgd(f.groups, o), ValueError);
  std::vector<ParamGroup> dup = f.groups;
  dup[1].params.emplace_back("a", f.b);
  EXPECT_THROW(Sgd(dup, SgdOptions()), ValueError);
  dup = f.groups;
  dup[1].params.emplace_back("a2", f.a);
  EXPECT_THROW(Sgd(dup, SgdOptions()), ValueError);
  std::vector<ParamGroup> ints = {ParamGroup{{{"i", zeros({2}, DType::I64)}}, {}, {}}};
  EXPECT_THROW(Sgd(ints, SgdOptions()), DTypeError);
  AdamOptions bad;
  bad.beta1 = 1.0;
  EXPECT_THROW(Adam(f.groups, bad), ValueError);

  SgdOptions m;
  m.momentum = 0.9;
  Sgd sgd(f.groups, m);
  EXPECT_THROW(sgd.load_state_dict({{"zzz.momentum_buffer", zeros({2}, DType::F64)}}), ValueError);
  EXPECT_THROW(sgd.load_state_dict({{"a.velocity", zeros({3, 2}, DType::F64)}}), ValueError);
  try {
    sgd.load_state_dict({{"a.momentum_buffer", zeros({2, 3}, DType::F64)}});
    ADD_FAILURE();
  } catch (const ShapeError& e) {
    EXPECT_NE(std::string(e.what()).find("'a.momentum_buffer' has shape [2, 3]"), std::string::npos) << e.what();
  }
  Adam adam(f.groups, AdamOptions{});
  EXPECT_THROW(adam.load_state_dict({{"a.exp_avg", zeros({3, 2}, DType::F64)}}), ValueError);  // incomplete
}

// make_optimizer builds the optimizer its spec names: the same updates, bit for bit, as the class made by hand
// with the documented options (Nesterov only with momentum; AdamW's decay decoupled).
void expect_same_steps(const OptimizerSpec& spec,
                       const std::function<std::unique_ptr<Optimizer>(const NamedTensors&)>& by_hand) {
  const uint64_t seed = fresh_seed();
  std::vector<std::vector<double>> results;
  for (int built = 0; built < 2; ++built) {
    Generator gen(seed);
    Fixture f(gen);
    NamedTensors params = {{"a", f.a}, {"b", f.b}, {"c", f.c}};
    std::unique_ptr<Optimizer> opt = built == 0 ? make_optimizer(spec, params) : by_hand(params);
    EXPECT_EQ(opt->name(), spec.kind);
    EXPECT_EQ(opt->lr(0), spec.lr);
    EXPECT_EQ(opt->weight_decay(0), spec.weight_decay);
    for (int step = 0; step < 3; ++step) {
      for (Tensor p : f.params()) p.set_grad(randn(p.shape(), gen, DType::F64));
      opt->step();
    }
    std::vector<double> all;
    for (const Tensor& p : f.params())
      for (double x : p.to_vector<double>()) all.push_back(x);
    results.push_back(all);
  }
  EXPECT_EQ(results[0], results[1]) << spec.kind;
}

TEST(MakeOptimizer, BuildsWhatItsSpecNames) {
  expect_same_steps({"sgd", 0.1, 0.9, true, 5e-4}, [](const NamedTensors& p) {
    SgdOptions o;
    o.lr = 0.1, o.momentum = 0.9, o.nesterov = true, o.weight_decay = 5e-4;
    return std::make_unique<Sgd>(single_group(p), o);
  });
  expect_same_steps({"sgd", 0.05, 0.8, false, 0}, [](const NamedTensors& p) {
    SgdOptions o;
    o.lr = 0.05, o.momentum = 0.8;
    return std::make_unique<Sgd>(single_group(p), o);
  });
  // Nesterov needs momentum: without it the spec's Nesterov is no error, plain SGD runs.
  expect_same_steps({"sgd", 0.2, 0, true, 1e-3}, [](const NamedTensors& p) {
    SgdOptions o;
    o.lr = 0.2, o.weight_decay = 1e-3;
    return std::make_unique<Sgd>(single_group(p), o);
  });
  expect_same_steps({"adam", 0.01, 0.9, true, 0.05}, [](const NamedTensors& p) {
    AdamOptions o;  // PyTorch's betas (0.9, 0.999) and eps 1e-8
    o.lr = 0.01, o.weight_decay = 0.05;
    return std::make_unique<Adam>(single_group(p), o);
  });
  expect_same_steps({"adamw", 0.02, 0.9, true, 0.1}, [](const NamedTensors& p) {
    AdamOptions o;
    o.lr = 0.02, o.weight_decay = 0.1, o.decoupled_weight_decay = true;
    return std::make_unique<Adam>(single_group(p), o);
  });
  Generator gen(fresh_seed());
  Fixture f(gen);
  try {
    make_optimizer({"lamb"}, {{"a", f.a}});
    ADD_FAILURE() << "an unknown kind was accepted";
  } catch (const ValueError& e) {
    EXPECT_NE(e.message().find("unknown optimizer 'lamb' (known: sgd, adam, adamw)"), std::string::npos) << e.what();
  }
}

// ---- schedules ----

TEST(LrSchedule, FactorsFollowPyTorch) {
  EXPECT_EQ(constant_lr()->factor(1000), 1.0);
  auto st = step_lr(3, 0.5);
  EXPECT_EQ(st->factor(2), 1.0);
  EXPECT_EQ(st->factor(3), 0.5);
  EXPECT_EQ(st->factor(7), 0.25);
  auto ms = multistep_lr({2, 5}, 0.1);
  EXPECT_EQ(ms->factor(1), 1.0);
  EXPECT_NEAR(ms->factor(2), 0.1, 1e-15);
  EXPECT_NEAR(ms->factor(6), 0.01, 1e-15);
  auto cos = cosine_lr(10, 0.1);
  for (int t : {0, 3, 5, 10, 12}) {
    double tt = std::min(t, 10);
    EXPECT_NEAR(cos->factor(t), 0.1 + 0.9 * 0.5 * (1 + std::cos(M_PI * tt / 10)), 1e-15) << t;
  }
  auto warm = warmup_lr(4, 0.2, cosine_lr(10));
  EXPECT_NEAR(warm->factor(0), 0.2, 1e-15);
  EXPECT_NEAR(warm->factor(2), 0.6, 1e-15);
  EXPECT_NEAR(warm->factor(4), 1.0, 1e-15);
  EXPECT_NEAR(warm->factor(9), 0.5, 1e-15);  // cosine half way (5 of 10 steps after the warm-up)
  EXPECT_THROW(step_lr(0), ValueError);
  EXPECT_THROW(multistep_lr({5, 2}), ValueError);
  EXPECT_THROW(cosine_lr(10, 2.0), ValueError);
}

TEST(LrSchedule, ParsesSpecsInEpochs) {
  EXPECT_EQ(parse_lr_schedule("constant", 10, 100)->factor(50), 1.0);
  EXPECT_EQ(parse_lr_schedule("step:2:0.5", 10, 100)->factor(20), 0.5);
  EXPECT_EQ(parse_lr_schedule("step:2", 10, 100)->factor(19), 1.0);
  EXPECT_NEAR(parse_lr_schedule("multistep:1,3", 10, 100)->factor(35), 0.01, 1e-15);
  EXPECT_NEAR(parse_lr_schedule("cosine", 10, 100)->factor(50), 0.5, 1e-15);
  auto w = parse_lr_schedule("warmup:0.5:0+cosine:0.1", 10, 100);  // 5 warm-up steps, then 95 cosine steps
  EXPECT_EQ(w->factor(0), 0.0);
  EXPECT_NEAR(w->factor(5), 1.0, 1e-15);
  EXPECT_NEAR(w->factor(100), 0.1, 1e-15);
  std::vector<std::string> malformed = {
      "",         "cosin",           "step",         "step:x",          "multistep:3,1",
      "warmup:1", "warmup:0+cosine", "cosine:0.1:2", "warmup:10+cosine"};
  // Malformed numbers and items.
  for (const char* bad : {"step:inf", "step:nan", "step:1e300", "step:-1", "step:2:+0.5", "step: 2", "cosine:nan",
                          "multistep:1,,3", "multistep:1,3,", "warmup:1:0.1e+cosine", "step:"})
    malformed.push_back(bad);
  for (const std::string& bad : malformed) {
    try {
      parse_lr_schedule(bad, 10, 100);
      ADD_FAILURE() << "accepted '" << bad << "'";
    } catch (const ValueError& e) {
      EXPECT_NE(std::string(e.what()).find("learning-rate schedule '" + bad + "'"), std::string::npos) << e.what();
    }
  }
  // One error format: the spec, the value and what it should be, and the grammar.
  tandem::testing::expect_error<ValueError>([] { parse_lr_schedule("step:inf", 10, 100); },
                                            {"learning-rate schedule 'step:inf': epochs 'inf' is not a finite number",
                                             "(expected constant | step:EPOCHS[:GAMMA]"});
}

TEST(LrScheduler, SetsGroupRatesAndRestoresPosition) {
  Generator gen(fresh_seed());
  Fixture f(gen);
  SgdOptions o;
  o.lr = 0.4;
  Sgd sgd(f.groups, o);
  LrScheduler sched(sgd, step_lr(2, 0.5));
  EXPECT_EQ(sgd.lr(0), 0.4);
  EXPECT_EQ(sgd.lr(1), 0.03);
  sched.step();
  sched.step();
  EXPECT_EQ(sched.position(), 2);
  EXPECT_EQ(sgd.lr(0), 0.2);
  EXPECT_EQ(sgd.lr(1), 0.015);
  EXPECT_EQ(sgd.initial_lr(0), 0.4);
  Sgd other(f.groups, o);
  LrScheduler restored(other, step_lr(2, 0.5));
  restored.load_state_dict(sched.state_dict());
  EXPECT_EQ(restored.position(), 2);
  EXPECT_EQ(other.lr(0), 0.2);
  EXPECT_THROW(restored.load_state_dict({}), ValueError);
}

}  // namespace
}  // namespace optim
}  // namespace tandem
