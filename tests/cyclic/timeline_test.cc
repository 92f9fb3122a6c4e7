// Tests of cyclic-DP timelines: the paper figure's unit-time model (one operation per stage per time step,
// constant stored activations N(S+1)/2 against DP's peak N·S), spread communication, valid schedules in every
// mode, and errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <vector>

#include "parallel/cyclic/accounting.h"
#include "parallel/cyclic/timeline.h"
#include "parallel/simulator.h"
#include "runtime/base/error.h"

namespace tandem {
namespace parallel {
namespace cyclic {
namespace {

Timeline unit_timeline(Rule rule, Mode mode, int n, int s, int64_t rounds, GradSync sync = GradSync::AllReduce) {
  TimelineSpec spec;
  spec.rule = rule;
  spec.mode = mode;
  spec.micro_batches = n;
  spec.stages = s;
  spec.rounds = rounds;
  spec.sync = sync;
  return build_timeline(spec, StageCosts::unit(s));
}

// Stored stage activations (one unit per stage) at integer time steps of the simulated unit-time timeline.
std::vector<double> stored_per_step(const Timeline& t, const SimResult& r) {
  ActivationProfile p = stored_activations(t, r.times, std::vector<double>(t.spec.stages, 1.0));
  std::vector<double> out;
  for (int step = 0; step < static_cast<int>(r.makespan_s); ++step) out.push_back(p.total.at(step + 0.5));
  return out;
}

TEST(UnitModel, CyclicStoredActivationsAreConstantInSteadyState) {
  for (auto ns : std::vector<std::pair<int, int>>{{3, 3}, {4, 4}, {8, 4}, {2, 4}, {8, 8}, {6, 3}}) {
    const int n = ns.first, s = ns.second;
    for (Rule rule : {Rule::CdpV1, Rule::CdpV2}) {
      if (rule == Rule::CdpV2 && n != s) continue;  // the code's v2 mask is derived for N = S
      Timeline t = unit_timeline(rule, Mode::DpWorkers, n, s, 6);
      SimResult r = simulate(t.schedule);
      const double period = 2.0 * s;
      // No stalls: the last micro-batch ends one period after it started, (N-1)·2S/N after the first.
      EXPECT_DOUBLE_EQ(r.makespan_s, 6 * period + (n - 1) * period / n) << n << "x" << s;
      std::vector<double> stored = stored_per_step(t, r);
      const double expected = n * (s + 1) / 2.0;
      // Steady state: from the start of the last micro-batch's first round to the end of the first's last.
      int from = static_cast<int>((n - 1) * period / n + 0.5), to = static_cast<int>(5 * period);
      for (int step = from; step < to; ++step)
        EXPECT_DOUBLE_EQ(stored[step], expected)
            << "N=" << n << " S=" << s << " " << rule_name(rule) << " step " << step;
    }
  }
}

TEST(UnitModel, DpPeaksAtNTimesSAtTheEndOfTheForward) {
  for (auto ns : std::vector<std::pair<int, int>>{{3, 3}, {4, 4}, {8, 4}}) {
    const int n = ns.first, s = ns.second;
    Timeline t = unit_timeline(Rule::Dp, Mode::DpWorkers, n, s, 3);
    SimResult r = simulate(t.schedule);
    EXPECT_DOUBLE_EQ(r.makespan_s, 3 * 2.0 * s);
    std::vector<double> stored = stored_per_step(t, r);
    for (int round = 0; round < 3; ++round)
      for (int step = 0; step < 2 * s; ++step) {
        // Forward of stage j (step j) holds j + 1 stages per micro-batch; backward of stage j (step 2S-1-j) too.
        int j = step < s ? step : 2 * s - 1 - step;
        EXPECT_DOUBLE_EQ(stored[round * 2 * s + step], n * (j + 1.0)) << "step " << step;
      }
    ActivationProfile p = stored_activations(t, r.times, std::vector<double>(s, 1.0));
    EXPECT_DOUBLE_EQ(p.total.peak(), n * s);
    // The time-average equals the cyclic constant N(S+1)/2.
    EXPECT_NEAR(p.total.mean(0, r.makespan_s), n * (s + 1) / 2.0, 1e-12);
  }
}

// The timeline figure of Cyclic Data Parallelism (Fournier & Oyallon 2024; the authors' repository shows it as
// cyclic_data_parallelism.png), panel "b) Cyclic Data Parallelism v1", transcribed by hand: S = 3 model stages
// (rows "Model Stage 1, 2, 3", one worker each), N = 3 micro-batches, one forward or backward of one stage per time
// step. Per stage row, time steps 0..21, each cell "<micro-batch 1-based><f|b>" (forward ↑ / backward ↓ in the
// figure) or "" where the stage is idle.
TEST(UnitModel, ModelParallelTimelineMatchesThePaperFigure) {
  const std::vector<std::vector<std::string>> figure = {
      // stage 1
      {"1f", "",   "2f", "",   "3f", "1b", "1f", "2b", "2f", "3b", "3f",
       "1b", "1f", "2b", "2f", "3b", "3f", "1b", "1f", "2b", "2f", "3b"},
      // stage 2
      {"",   "1f", "",   "2f", "1b", "3f", "2b", "1f", "3b", "2f", "1b",
       "3f", "2b", "1f", "3b", "2f", "1b", "3f", "2b", "1f", "3b", "2f"},
      // stage 3
      {"",   "",   "1f", "1b", "2f", "2b", "3f", "3b", "1f", "1b", "2f",
       "2b", "3f", "3b", "1f", "1b", "2f", "2b", "3f", "3b", "1f", "1b"},
  };
  Timeline t = unit_timeline(Rule::CdpV1, Mode::ModelParallel, 3, 3, 5);
  SimResult r = simulate(t.schedule);
  std::vector<std::map<int, std::string>> cells(3);
  for (const InstrTime& it : r.times) {
    const Instr& i = t.schedule.at(it.id);
    if (i.kind != OpKind::Forward && i.kind != OpKind::Backward) continue;
    EXPECT_DOUBLE_EQ(it.end_s - it.start_s, 1.0);
    int step = static_cast<int>(it.start_s);
    EXPECT_EQ(cells[i.worker].count(step), 0u) << "two operations of stage " << i.worker << " at step " << step;
    cells[i.worker][step] = std::to_string(i.micro + 1) + (i.kind == OpKind::Forward ? "f" : "b");
  }
  for (int l = 0; l < 3; ++l)
    for (int step = 0; step < 22; ++step) {
      auto it = cells[l].find(step);
      EXPECT_EQ(it == cells[l].end() ? std::string() : it->second, figure[l][step])
          << "stage " << l + 1 << " step " << step;
    }
  // Steady state: every stage busy at every step (S workers serve N = S micro-batches).
  for (int l = 0; l < 3; ++l)
    for (int step = 6; step < 24; ++step) EXPECT_EQ(cells[l].count(step), 1u) << "stage " << l << " idle at " << step;
}

TEST(UnitModel, CdpV2MaskNeedsNoWaitWhenNEqualsS) {
  // Under CDP-v2 a current stage needs ḡ of the round just finished; with N = S that is always complete in
  // time (the derivation of the mask), in every mode.
  for (int s : {2, 3, 4, 8})
    for (Mode mode : {Mode::DpWorkers, Mode::ModelParallel, Mode::Zero}) {
      Timeline t = unit_timeline(Rule::CdpV2, mode, s, s, 4);
      SimResult r = simulate(t.schedule);
      EXPECT_DOUBLE_EQ(r.makespan_s, 4 * 2.0 * s + (s - 1) * 2.0) << mode_name(mode) << " S=" << s;
    }
}

// The shortest steady-state period (time between consecutive starts of micro-batch 0) that the rules'
// dependencies allow in the unit model when every micro-batch has its own worker, computed from the
// dependencies alone by running every operation as early as they let it:
// - worker r runs its micro-batch's forwards 0..S-1 then backwards S-1..0, one time step each, round after round;
// - the cyclic rules' uniform delay: a micro-batch starts once its predecessor (r - 1, or N - 1 of the previous
//   round) has done the whole number of operations nearest to P/N = 2S/N (the earlier on a tie); DP has none;
// - parameters: stage l of a micro-batch in round k computes with θ^k, which needs the gradient of round k - 1
//   complete (every micro-batch's backward of stage l), or with θ^{k-1}, one round earlier (CDP-v1 always;
//   CDP-v2 where micro + stage < S - 1, the official code's mask; DP never).
// Communication and updates are free.
double shortest_period(Rule rule, int n, int s) {
  const int ops = 2 * s;
  int j = 1;
  for (int c = 2; c <= ops; ++c)
    if (std::abs(c - 2.0 * s / n) < std::abs(j - 2.0 * s / n) - 1e-12) j = c;
  const int rounds = 40;
  // end[k][r][o]: end of operation o (0..2S-1) of micro-batch r in round k.
  std::vector<std::vector<std::vector<double>>> end(rounds,
                                                    std::vector<std::vector<double>>(n, std::vector<double>(ops)));
  std::vector<double> first_start(rounds);
  for (int k = 0; k < rounds; ++k)
    for (int r = 0; r < n; ++r) {
      double t = 0;
      if (rule != Rule::Dp && r > 0) t = end[k][r - 1][j - 1];
      if (rule != Rule::Dp && r == 0 && k > 0) t = end[k - 1][n - 1][j - 1];
      if (k > 0) t = std::max(t, end[k - 1][r][ops - 1]);
      if (r == 0) first_start[k] = t;
      for (int o = 0; o < ops; ++o) {
        if (o < s) {
          const int l = o;
          const bool old = rule == Rule::CdpV1 || (rule == Rule::CdpV2 && r + l < s - 1);
          const int g = old ? k - 2 : k - 1;  // the round whose gradient the version needs
          if (g >= 0)
            for (int q = 0; q < n; ++q) t = std::max(t, end[g][q][ops - 1 - l]);
        }
        end[k][r][o] = t + 1;
        t += 1;
      }
    }
  const int m = 10;
  return (first_start[rounds - 1] - first_start[rounds - 1 - m]) / m;
}

// The simulated timeline's steady-state period: the mean time between starts of micro-batch 0 over the last
// rounds (the fill at the start excluded).
double simulated_period(Rule rule, Mode mode, GradSync sync, int n, int s) {
  const int64_t rounds = 16, m = 8;
  Timeline t = unit_timeline(rule, mode, n, s, rounds, sync);
  SimResult r = simulate(t.schedule);
  std::map<int64_t, double> start;
  for (const InstrTime& it : r.times) {
    const Action& a = t.actions[it.id];
    if (a.kind == ActionKind::Forward && a.micro == 0 && a.stage == 0) start[a.round] = it.start_s;
  }
  return (start.at(rounds - 1) - start.at(rounds - 1 - m)) / m;
}

TEST(UnitModel, CdpV2RunsAtThePeriodItsDependenciesAllow) {
  // The reference itself: DP and CDP-v1 run at P = 2S (N <= 2S; a round of N one-operation delays beyond),
  // CDP-v2 at CDP-v1's period when N = S (its mask is derived for that case) and slower when N > S.
  EXPECT_DOUBLE_EQ(shortest_period(Rule::Dp, 4, 4), 8);
  EXPECT_DOUBLE_EQ(shortest_period(Rule::CdpV1, 4, 4), 8);
  EXPECT_DOUBLE_EQ(shortest_period(Rule::CdpV1, 8, 2), 8);
  for (int s : {2, 3, 4, 8}) EXPECT_DOUBLE_EQ(shortest_period(Rule::CdpV2, s, s), 2.0 * s);
  EXPECT_GT(shortest_period(Rule::CdpV2, 8, 4), shortest_period(Rule::CdpV1, 8, 4));
  for (auto ns :
       std::vector<std::pair<int, int>>{{2, 2}, {3, 3}, {4, 4}, {8, 8}, {8, 4}, {2, 4}, {5, 3}, {4, 2}, {3, 5}, {6, 3}})
    for (Mode mode : {Mode::DpWorkers, Mode::Zero})
      for (GradSync sync : {GradSync::Chain, GradSync::AllReduce}) {
        if (mode == Mode::Zero && sync == GradSync::AllReduce) continue;  // zero always sums along its chain
        const int n = ns.first, s = ns.second;
        for (Rule rule : {Rule::CdpV1, Rule::CdpV2})
          EXPECT_NEAR(simulated_period(rule, mode, sync, n, s), shortest_period(rule, n, s), 1e-9)
              << rule_name(rule) << " " << mode_name(mode) << " " << sync_name(sync) << " N=" << n << " S=" << s;
      }
}

TEST(UnitModel, ChainSpreadsGradientTrafficOverTheRound) {
  const int n = 4, s = 4;
  TimelineSpec spec;
  spec.micro_batches = n;
  spec.stages = s;
  spec.rounds = 6;
  StageCosts c = StageCosts::unit(s);
  c.param_bytes.assign(s, 1000);
  auto bins = [&](Rule rule, GradSync sync) {
    spec.rule = rule;
    spec.sync = sync;
    Timeline t = build_timeline(spec, c);
    SimResult r = simulate(t.schedule);
    return scheduled_bytes_per_bin(t, r.times, 1.0, static_cast<int>(r.makespan_s) + 1);
  };
  std::vector<double> dp = bins(Rule::Dp, GradSync::AllReduce);
  std::vector<double> cdp = bins(Rule::CdpV1, GradSync::Chain);
  // DP: nothing moves during the forward half of a round, everything in the backward half.
  int dp_idle = 0, cdp_idle = 0;
  double dp_max = 0, cdp_max = 0;
  for (int step = 2 * s; step < 5 * 2 * s; ++step) {
    dp_idle += dp[step] == 0;
    cdp_idle += cdp[step] == 0;
    dp_max = std::max(dp_max, dp[step]);
    cdp_max = std::max(cdp_max, cdp[step]);
  }
  EXPECT_EQ(dp_idle, 4 * s);  // S idle steps of every 2S
  EXPECT_EQ(cdp_idle, 0);
  // The same bytes in total (the chain: 2(N-1) messages per stage and round; the all-reduce: 2(N-1)/N sent by
  // each of N workers), but the busiest step of CDP carries at most 2/3 of DP's.
  double dp_sum = 0, cdp_sum = 0;
  for (double x : dp) dp_sum += x;
  for (double x : cdp) cdp_sum += x;
  EXPECT_DOUBLE_EQ(cdp_sum, dp_sum);
  EXPECT_LE(cdp_max, dp_max * 2 / 3);
}

TEST(Timeline, EveryModeRuleAndShapeGivesAValidDeadlockFreeSchedule) {
  for (Mode mode : {Mode::DpWorkers, Mode::ModelParallel, Mode::Zero})
    for (Rule rule : {Rule::Dp, Rule::CdpV1, Rule::CdpV2})
      for (GradSync sync : {GradSync::AllReduce, GradSync::Chain})
        for (auto ns :
             std::vector<std::pair<int, int>>{{1, 1}, {1, 3}, {3, 1}, {2, 3}, {2, 4}, {3, 3}, {5, 3}, {4, 2}, {8, 4}}) {
          for (int64_t first : {0, 1, 3}) {
            TimelineSpec spec;
            spec.rule = rule;
            spec.mode = mode;
            spec.sync = sync;
            spec.micro_batches = ns.first;
            spec.stages = ns.second;
            spec.first_round = first;
            spec.rounds = 3;
            StageCosts c = StageCosts::unit(ns.second);
            for (int l = 0; l < ns.second; ++l) {
              c.forward_s[l] = 1 + 0.5 * l;  // unequal stages
              c.backward_s[l] = 2 + 0.25 * l;
              c.param_bytes[l] = 100 * (l + 1);
            }
            c.link_bytes_per_s = 1000;
            Timeline t;
            ASSERT_NO_THROW(t = build_timeline(spec, c)) << mode_name(mode) << " " << rule_name(rule) << " " << ns.first
                                                         << "x" << ns.second << " from " << first;
            ASSERT_NO_THROW(simulate(t.schedule));
            // Also when a send completes only with its receive, as over NCCL (a crossed pair deadlocks).
            ASSERT_NO_THROW(simulate(t.schedule, SendModel::Rendezvous))
                << mode_name(mode) << " " << rule_name(rule) << " " << sync_name(sync) << " " << ns.first << "x"
                << ns.second << " from " << first;
            EXPECT_EQ(t.workers(), workers_needed(mode, ns.first, ns.second));
            // Every (round, micro, stage) has exactly one forward and one backward.
            int fwd = 0, bwd = 0;
            for (const Action& a : t.actions) {
              fwd += a.kind == ActionKind::Forward;
              bwd += a.kind == ActionKind::Backward;
            }
            EXPECT_EQ(fwd, 3 * ns.first * ns.second);
            EXPECT_EQ(bwd, fwd);
          }
        }
}

TEST(Timeline, OffsetsFallOnTheOperationNearestToPOverN) {
  auto starts = [](const std::vector<double>& fwd, const std::vector<double>& bwd, int n) {
    TimelineSpec spec;
    spec.rule = Rule::CdpV1;
    spec.micro_batches = n;
    spec.stages = static_cast<int>(fwd.size());
    spec.rounds = 2;
    StageCosts c = StageCosts::unit(spec.stages);
    c.forward_s = fwd;
    c.backward_s = bwd;
    Timeline t = build_timeline(spec, c);
    SimResult r = simulate(t.schedule);
    std::vector<double> out;  // round 0's start of each micro-batch
    for (const InstrTime& it : r.times) {
      const Action& a = t.actions[it.id];
      if (a.kind == ActionKind::Forward && a.stage == 0 && a.round == 0) out.push_back(it.start_s);
    }
    std::sort(out.begin(), out.end());
    return out;
  };
  // P = 10, P/N = 3.33: the predecessor's first forward ends at 3, nearest.
  EXPECT_EQ(starts({3, 1, 1}, {3, 1, 1}, 3), (std::vector<double>{0, 3, 6}));
  // P = 16, P/N = 4: ends 5, 6, ...: the first forward (5) is nearest; the micro-batches still start apart.
  EXPECT_EQ(starts({5, 1, 1}, {3, 3, 3}, 4), (std::vector<double>{0, 5, 10, 15}));
}

TEST(Timeline, UpdatesApplyTheRightGradients) {
  // dp-workers, CDP-v1 over rounds 2..4: each worker's stage l applies ḡ^{k-1} in round k's window.
  TimelineSpec spec;
  spec.rule = Rule::CdpV1;
  spec.micro_batches = 2;
  spec.stages = 3;
  spec.first_round = 2;
  spec.rounds = 3;
  Timeline t = build_timeline(spec, StageCosts::unit(3));
  std::map<std::pair<int, int>, std::vector<int64_t>> applied;  // (worker, stage) -> grad rounds
  for (size_t id = 0; id < t.actions.size(); ++id) {
    const Action& a = t.actions[id];
    if (a.kind != ActionKind::Update) continue;
    EXPECT_EQ(a.grad_round, a.iteration - 1);
    EXPECT_EQ(t.schedule.at(static_cast<int>(id)).lane, kComputeLane);
    applied[{t.schedule.at(static_cast<int>(id)).worker, a.stage}].push_back(a.grad_round);
  }
  for (int w = 0; w < 2; ++w)
    for (int l = 0; l < 3; ++l) EXPECT_EQ(applied[std::make_pair(w, l)], (std::vector<int64_t>{1, 2, 3}));
  // CDP-v1 from round 0 skips the first update.
  spec.first_round = 0;
  Timeline t0 = build_timeline(spec, StageCosts::unit(3));
  for (const Action& a : t0.actions)
    if (a.kind == ActionKind::Update) {
      EXPECT_GE(a.grad_round, 0);
    }
  // CDP-v2's versions: stale iff micro + stage < S - 1.
  EXPECT_EQ(version_of(Rule::CdpV2, 5, 0, 0, 3), 4);
  EXPECT_EQ(version_of(Rule::CdpV2, 5, 1, 1, 3), 5);
  EXPECT_EQ(version_of(Rule::CdpV2, 0, 0, 0, 3), 0);
  EXPECT_EQ(version_of(Rule::CdpV1, 5, 0, 0, 3), 5);
}

TEST(Timeline, BadSpecsAreRefused) {
  TimelineSpec spec;
  spec.micro_batches = 0;
  EXPECT_THROW(build_timeline(spec, StageCosts::unit(1)), ValueError);
  spec.micro_batches = 2;
  spec.stages = kMaxStages + 1;
  EXPECT_THROW(build_timeline(spec, StageCosts::unit(2)), ValueError);
  spec.stages = 2;
  EXPECT_THROW(build_timeline(spec, StageCosts::unit(3)), ValueError);  // costs for 3 stages
  StageCosts c = StageCosts::unit(2);
  c.forward_s[1] = 0;
  EXPECT_THROW(build_timeline(spec, c), ValueError);
  spec.rounds = 0;
  EXPECT_THROW(build_timeline(spec, StageCosts::unit(2)), ValueError);
  EXPECT_THROW(parse_rule("cdp-v3"), ValueError);
  EXPECT_THROW(parse_mode("pipeline"), ValueError);
  EXPECT_THROW(parse_sync("ring"), ValueError);
  EXPECT_EQ(parse_rule("cdp-v2"), Rule::CdpV2);
  EXPECT_EQ(parse_mode("mp"), Mode::ModelParallel);
}

}  // namespace
}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
