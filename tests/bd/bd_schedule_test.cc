// Tests of the Pipe-BD schedules without models: relay slices for any replica counts, the structure of each
// strategy's schedule, DPU's one-step-ahead limit, costs, simulation and the projections.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

#include "data/split.h"
#include "parallel/bd/bd_schedule.h"
#include "parallel/bd/projection.h"
#include "parallel/simulator.h"
#include "runtime/base/error.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace bd {
namespace {

BlockProfile random_profile(int blocks, int max_g, int64_t batch, Generator& gen) {
  BlockProfile p;
  p.batch = batch;
  std::vector<double> work;
  for (int b = 0; b < blocks; ++b) {
    p.relay_s.push_back(b + 1 < blocks ? 0.001 + 0.002 * gen.uniform() : 0);
    work.push_back(0.005 + 0.02 * gen.uniform());
  }
  // Per-worker batch B/g: a fixed cost plus one proportional to the rows.
  for (int g = 1; g <= max_g; ++g) {
    std::vector<double> t, s, ar;
    std::vector<int64_t> m;
    for (int b = 0; b < blocks; ++b) {
      t.push_back(0.3 * work[b] / g + 0.0002);
      s.push_back(work[b] / g + 0.0005);
      ar.push_back(g == 1 ? 0 : 0.0003 * (g - 1) / g);
      m.push_back((10 << 20) / g + (1 << 20));
    }
    p.teacher_s.push_back(t);
    p.student_s.push_back(s);
    p.allreduce_s.push_back(ar);
    p.memory.push_back(m);
    p.load_s.push_back(0.001 / g);
  }
  return p;
}

std::vector<int64_t> row_bytes(int blocks) {
  std::vector<int64_t> r;
  for (int j = 0; j <= blocks; ++j) r.push_back(1000 * (j + 1));
  return r;
}

Plan plan_of(const std::vector<Stage>& stages) {
  Plan p;
  p.stages = stages;
  return p;
}

TEST(RelaySlices, CoverEveryReceiversRowsFromTheSendersThatHoldThemForAnyReplicaCounts) {
  for (int senders = 1; senders <= 7; ++senders)
    for (int receivers = 1; receivers <= 7; ++receivers)
      for (int64_t rows : {1, 5, 8, 13, 64, 255}) {
        std::vector<RelaySlice> sl = relay_slices(senders, receivers, rows);
        std::vector<int> seen(static_cast<size_t>(rows), 0);
        std::map<int, int64_t> next_row;  // receiver -> next expected global row
        for (const RelaySlice& s : sl) {
          ASSERT_GT(s.count, 0);
          const data::RowRange have = data::rows_for(s.sender, senders, rows);
          const data::RowRange want = data::rows_for(s.receiver, receivers, rows);
          EXPECT_GE(s.begin, std::max(have.begin, want.begin));
          EXPECT_LE(s.begin + s.count, std::min(have.end(), want.end()));
          if (!next_row.count(s.receiver)) next_row[s.receiver] = want.begin;
          EXPECT_EQ(s.begin, next_row[s.receiver]) << "receiver " << s.receiver << " assembles in row order";
          next_row[s.receiver] = s.begin + s.count;
          for (int64_t r = s.begin; r < s.begin + s.count; ++r) ++seen[r];
        }
        for (int64_t r = 0; r < rows; ++r) EXPECT_EQ(seen[r], 1) << senders << "->" << receivers << " row " << r;
      }
  EXPECT_THROW(relay_slices(0, 2, 8), ValueError);
}

int count(const Schedule& s, OpKind kind, int worker = -1) {
  int n = 0;
  for (const Instr& i : s.instrs()) n += i.kind == kind && (worker < 0 || i.worker == worker);
  return n;
}

TEST(BdSchedule, EachStrategyHasTheInstructionsItsDefinitionSays) {
  const int k = 6, steps = 4;
  const std::vector<int64_t> rb = row_bytes(k);
  // DP: per block and step, every worker loads, runs the teacher prefix 0..b, trains b, all-reduces, steps.
  DistillSchedule dp = build_schedule(dp_layout(k, 4), 8, steps, 2, rb);
  EXPECT_EQ(count(dp.schedule, OpKind::LoadBatch), k * steps * 4);
  EXPECT_EQ(count(dp.schedule, OpKind::Forward), (1 + 2 + 3 + 4 + 5 + 6) * steps * 4);
  EXPECT_EQ(count(dp.schedule, OpKind::AllReduce), k * steps * 4);
  EXPECT_EQ(count(dp.schedule, OpKind::Send), 0);
  for (size_t id = 0; id < dp.info.size(); ++id) EXPECT_EQ(dp.info[id].rows, 2);
  EXPECT_THROW(build_schedule(dp_layout(k, 4), 10, steps, 2, rb), ValueError);  // 10 rows over 4 workers

  // TR: one stage per worker, a barrier per step on every worker, relays on the comm lane.
  const Plan pipe = plan_of({{0, 1, 1}, {2, 3, 1}, {4, 4, 1}, {5, 5, 1}});
  DistillSchedule tr = build_schedule(pipeline_layout(Strategy::TR, pipe, k, 4), 8, steps, 2, rb);
  EXPECT_EQ(count(tr.schedule, OpKind::Barrier), 4 * steps);
  EXPECT_EQ(count(tr.schedule, OpKind::LoadBatch), steps);
  EXPECT_EQ(count(tr.schedule, OpKind::LoadBatch, 0), steps);
  EXPECT_EQ(count(tr.schedule, OpKind::Forward), k * steps);  // each teacher block once per step
  EXPECT_EQ(count(tr.schedule, OpKind::Send), 3 * steps);
  for (const Instr& i : tr.schedule.instrs())
    if (i.kind == OpKind::Send) {
      EXPECT_EQ(i.lane, kCommLane);
      EXPECT_EQ(i.bytes, 8 * rb[i.block]);
    }
  // DPU: the same without barriers.
  DistillSchedule dpu = build_schedule(pipeline_layout(Strategy::DPU, pipe, k, 4), 8, steps, 2, rb);
  EXPECT_EQ(count(dpu.schedule, OpKind::Barrier), 0);
  EXPECT_EQ(dpu.schedule.size(), tr.schedule.size() - 4 * steps);
  EXPECT_THROW(pipeline_layout(Strategy::TR, plan_of({{0, 1, 2}, {2, 5, 2}}), k, 4), ValueError);

  // AHD [0-1]x3 [2-5]x1 with 8 rows: thirds of 3, 3, 2 rows, each sent to the one receiver.
  DistillSchedule ahd =
      build_schedule(pipeline_layout(Strategy::AHD, plan_of({{0, 1, 3}, {2, 5, 1}}), k, 4), 8, steps, 2, rb);
  EXPECT_EQ(count(ahd.schedule, OpKind::LoadBatch), 3 * steps);
  EXPECT_EQ(count(ahd.schedule, OpKind::Recv, 3), 3 * steps);
  EXPECT_EQ(count(ahd.schedule, OpKind::AllReduce), 3 * 2 * steps);
  for (const Instr& i : ahd.schedule.instrs())
    if (i.kind == OpKind::Recv) {
      const data::RowRange from = data::rows_for(i.peer, 3, 8);
      EXPECT_EQ(ahd.info[i.id].offset, from.begin);
      EXPECT_EQ(ahd.info[i.id].count, from.count);
    }
  // LS: no communication at all.
  Layout ls = dp_layout(k, 4);
  ls.strategy = Strategy::LS;
  ls.bins = {{0, 5}, {1, 4}, {2}, {3}};
  DistillSchedule lss = build_schedule(ls, 8, steps, 2, rb);
  EXPECT_EQ(count(lss.schedule, OpKind::AllReduce) + count(lss.schedule, OpKind::Send), 0);
  EXPECT_EQ(count(lss.schedule, OpKind::ForwardBackward, 0), 2 * steps);
}

// A fast producer and a slow consumer: with DPU the producer may start step s only after the consumer took
// step s - 1's relay, i.e. it runs at most one step ahead; the simulator honours that dependency.
TEST(BdSchedule, DecoupledUpdatesLetAProducerRunAtMostOneStepAhead) {
  const int k = 2, steps = 6;
  BlockProfile p;
  p.batch = 8;
  p.teacher_s = {{0.001, 0.001}};
  p.student_s = {{0.001, 0.010}};  // the consumer's student is 10x slower
  p.allreduce_s = {{0, 0}};
  p.memory = {{1, 1}};
  p.relay_s = {0.0001, 0};
  DistillSchedule d = build_schedule(pipeline_layout(Strategy::DPU, plan_of({{0, 0, 1}, {1, 1, 1}}), k, 2), 8, steps,
                                     steps, row_bytes(k));
  apply_costs(d, p);
  SimResult r = simulate(d.schedule);
  std::map<int, double> producer_start, consumer_recv_end, consumer_update_end;
  for (const Instr& i : d.schedule.instrs()) {
    if (i.worker == 0 && i.kind == OpKind::LoadBatch) producer_start[i.step] = r.times[i.id].start_s;
    if (i.worker == 1 && i.kind == OpKind::Recv) consumer_recv_end[i.step] = r.times[i.id].end_s;
    if (i.worker == 1 && i.kind == OpKind::Update) consumer_update_end[i.step] = r.times[i.id].end_s;
  }
  for (int s = 1; s < steps; ++s) {
    EXPECT_GE(producer_start[s], consumer_recv_end[s - 1] - 1e-12) << "step " << s;
    // ... and it is ahead: it starts step s while the consumer still trains step s - 1.
    EXPECT_LT(producer_start[s], consumer_update_end[s - 1]) << "step " << s;
  }
}

TEST(BdSchedule, CostsComeFromTheProfileAndTrWaitsAtItsBarriers) {
  Generator gen(tandem::testing::fresh_seed());
  const int k = 6;
  BlockProfile p = random_profile(k, 4, 64, gen);
  const Plan pipe = plan_pipeline(p, 4);
  DistillSchedule tr = build_schedule(pipeline_layout(Strategy::TR, pipe, k, 4), 64, 8, 8, row_bytes(k));
  DistillSchedule dpu = build_schedule(pipeline_layout(Strategy::DPU, pipe, k, 4), 64, 8, 8, row_bytes(k));
  apply_costs(tr, p);
  apply_costs(dpu, p);
  for (const Instr& i : tr.schedule.instrs()) {
    if (i.kind == OpKind::Forward) {
      EXPECT_EQ(i.cost_s, p.teacher_s[0][i.block]);
    } else if (i.kind == OpKind::ForwardBackward) {
      EXPECT_EQ(i.cost_s, p.student_s[0][i.block]);
    } else if (i.kind == OpKind::Send) {
      EXPECT_EQ(i.cost_s, p.relay_s[i.block - 1]);
    }
  }
  EXPECT_GE(simulate(tr.schedule).makespan_s, simulate(dpu.schedule).makespan_s);
  // A schedule needing more replicas than profiled is refused.
  DistillSchedule dp8 = build_schedule(dp_layout(k, 8), 64, 2, 2, row_bytes(k));
  EXPECT_THROW(apply_costs(dp8, p), ValueError);
}

TEST(Projection, ExtendsTheProfileAndComparesEveryStrategyWithDp) {
  Generator gen(tandem::testing::fresh_seed());
  const int k = 6;
  BlockProfile p = random_profile(k, 4, 256, gen);
  BlockProfile ext = extend_profile(p, 64);
  ASSERT_EQ(ext.max_replicas(), 64);
  for (int g = 0; g < 4; ++g) EXPECT_EQ(ext.student_s[g], p.student_s[g]);  // measured rows kept
  // The random profile is a + c/g per block: the fit recovers it.
  for (int b = 0; b < k; ++b) EXPECT_NEAR(ext.student_s[63][b], p.student_s[0][b] / 64 + 0.0005 * 63 / 64, 1e-9);
  std::vector<Projection> proj = project(p, {4, 8, 16, 64}, 8, row_bytes(k));
  std::map<std::pair<int, Strategy>, Projection> by;
  for (const Projection& x : proj) by[{x.workers, x.strategy}] = x;
  auto get = [&](int w, Strategy s) { return by.at(std::make_pair(w, s)); };
  for (int w : {4, 8, 16, 64}) {
    ASSERT_TRUE(by.count(std::make_pair(w, Strategy::DP))) << w;
    EXPECT_DOUBLE_EQ(get(w, Strategy::DP).speedup, 1.0);
    EXPECT_EQ(get(w, Strategy::TR).used, std::min(w, k));
    EXPECT_EQ(get(w, Strategy::AHD).used, w);
    EXPECT_GT(get(w, Strategy::AHD).speedup, 0);  // its value: MatchesClosedFormsForUniformStagesAndOneSlowStage
  }
  EXPECT_THROW(extend_profile(BlockProfile{}, 8), ValueError);
  EXPECT_THROW(project(p, {4}, 8, row_bytes(k), 1 << 30, PlanModel::PipeBD), ValueError);
}

// Projections where the makespans have closed forms. Four blocks on four workers; all-reduces cost 50 ms, so
// any replicated stage is slower than the pipeline and AHD runs one block per stage (S = 4 stages), each
// step taking C_i = T + S_i (teacher, student; loads and updates cost nothing). A DPU pipeline whose relays
// (r) fit in its stages (T + r <= max C) starts stage i's first step at i (T + r); from the first slowest
// stage j on, stages then run at its pace, starting their last step (n - 1) max C later, and the stages
// before j finish earlier (one step ahead at most). So n steps take (n - 1) max C + max_{i >= j} (i (T + r)
// + C_i): with uniform costs (S - 1)(T + r) + n C. DP runs every block b for n steps on all 4 workers at
// B/4: n sum_b (sum_{t <= b} T/4 + S_b/4 + AR).
TEST(Projection, MatchesClosedFormsForUniformStagesAndOneSlowStage) {
  const int k = 4, w = 4, n = 8;
  const double T = 0.002, r = 0.001, ar = 0.05;
  for (int slow = -1; slow < k; ++slow) {  // -1: uniform stage costs; else block `slow` is 3x slower
    std::vector<double> student(k, 0.010);
    if (slow >= 0) student[slow] = 0.030;
    BlockProfile p;
    p.batch = 64;
    p.relay_s = {r, r, r, 0};
    for (int g = 1; g <= w; ++g) {
      std::vector<double> sg;
      for (double x : student) sg.push_back(x / g);
      p.teacher_s.push_back(std::vector<double>(k, T / g));
      p.student_s.push_back(sg);
      p.allreduce_s.push_back(std::vector<double>(k, g == 1 ? 0 : ar));
      p.memory.push_back(std::vector<int64_t>(k, 1 << 20));
    }
    double slowest = 0, dp = 0;
    for (int b = 0; b < k; ++b) {
      slowest = std::max(slowest, T + student[b]);
      dp += (b + 1) * T / w + student[b] / w + ar;
    }
    dp *= n;
    double tail = 0;
    for (int i = std::max(slow, 0); i < k; ++i) tail = std::max(tail, i * (T + r) + T + student[i]);
    const double ahd = (n - 1) * slowest + tail;
    if (slow < 0) {
      ASSERT_NEAR(ahd, (k - 1) * (T + r) + n * (T + student[0]), 1e-15);
    }
    for (PlanModel model : {PlanModel::Tandem, PlanModel::PipeBD}) {
      std::map<Strategy, Projection> by;
      for (const Projection& x : project(p, {w}, n, row_bytes(k), 0, model)) by[x.strategy] = x;
      ASSERT_TRUE(by.count(Strategy::AHD) && by.count(Strategy::DP));
      EXPECT_EQ(by[Strategy::AHD].layout, "TR+DPU+AHD: [blocks 0]x1 [blocks 1]x1 [blocks 2]x1 [blocks 3]x1");
      EXPECT_NEAR(by[Strategy::DP].makespan_s, dp, 1e-12) << "slow block " << slow;
      EXPECT_NEAR(by[Strategy::AHD].makespan_s, ahd, 1e-12) << "slow block " << slow;
      EXPECT_NEAR(by[Strategy::AHD].speedup, dp / ahd, 1e-9) << "slow block " << slow;
    }
  }
}

// Workers that are threads of one process launch through its one launch path, so a run takes at least all
// their launches' host time (host_work_s): DP launches, on each of its w workers and every step, the teacher
// blocks up to b before each block b's student (as in MatchesClosedFormsForUniformStagesAndOneSlowStage); a
// pipeline of one block per stage launches each block once a step. Host times do not depend on the rows, so
// an extended profile repeats the last factor's; they survive the profile's JSON.
TEST(Projection, TheHostLaunchesOfAllWorkersAddUpAndBoundTheMakespan) {
  Generator gen(tandem::testing::fresh_seed());
  const int k = 4, w = 4, n = 8;
  BlockProfile p;
  p.batch = 64;
  p.relay_s = {0.001, 0.001, 0.001, 0};
  std::vector<double> th, sh;
  double dp_host = 0, pipeline_host = 0;
  for (int b = 0; b < k; ++b) {
    th.push_back(0.004 * (1 + gen.uniform()));
    sh.push_back(0.020 * (1 + gen.uniform()));
    dp_host += n * w * ((k - b) * th[b] + sh[b]);  // teacher block b runs before students b..k-1
    pipeline_host += n * (th[b] + sh[b]);
  }
  for (int g = 1; g <= w; ++g) {
    p.teacher_s.push_back(std::vector<double>(k, 0.002 / g));
    p.student_s.push_back(std::vector<double>(k, 0.010 / g));
    p.allreduce_s.push_back(std::vector<double>(k, g == 1 ? 0 : 0.05));  // AHD: one block per stage
    p.memory.push_back(std::vector<int64_t>(k, 1 << 20));
  }
  std::map<Strategy, Projection> gpu, host;
  for (const Projection& x : project(p, {w}, n, row_bytes(k))) gpu[x.strategy] = x;
  p.teacher_host_s.assign(w, th);
  p.student_host_s.assign(w, sh);
  for (const Projection& x : project(p, {w}, n, row_bytes(k))) host[x.strategy] = x;
  ASSERT_GT(dp_host, gpu[Strategy::DP].makespan_s);
  ASSERT_GT(pipeline_host, gpu[Strategy::AHD].makespan_s);
  EXPECT_EQ(host[Strategy::AHD].layout, "TR+DPU+AHD: [blocks 0]x1 [blocks 1]x1 [blocks 2]x1 [blocks 3]x1");
  EXPECT_NEAR(host[Strategy::DP].makespan_s, dp_host, 1e-12);
  EXPECT_NEAR(host[Strategy::AHD].makespan_s, pipeline_host, 1e-12);
  EXPECT_NEAR(host[Strategy::AHD].speedup, dp_host / pipeline_host, 1e-9);
  // Host times far below the GPU's leave every makespan as the simulator's.
  for (auto& row : p.student_host_s)
    for (double& v : row) v *= 1e-4;
  for (auto& row : p.teacher_host_s)
    for (double& v : row) v *= 1e-4;
  for (const Projection& x : project(p, {w}, n, row_bytes(k)))
    EXPECT_DOUBLE_EQ(x.makespan_s, gpu[x.strategy].makespan_s) << strategy_name(x.strategy);

  const BlockProfile ext = extend_profile(p, 8);
  ASSERT_EQ(ext.student_host_s.size(), 8u);
  EXPECT_EQ(ext.teacher_host_s[7], p.teacher_host_s[3]);
  EXPECT_EQ(ext.student_host_s[7], p.student_host_s[3]);
  const BlockProfile back = BlockProfile::from_json(p.to_json());
  EXPECT_EQ(back.teacher_host_s, p.teacher_host_s);
  EXPECT_EQ(back.student_host_s, p.student_host_s);
  p.student_host_s.pop_back();
  EXPECT_THROW(BlockProfile::from_json(p.to_json()), ValueError);
}

// Which planner model predicts the step time of the AHD schedule as executed (here: as the simulator times
// it from the same profile) better, where the two models' predictions differ (a replicated stage receiving a
// relay). The relay into such a stage runs on the senders' comm lanes, overlapped with the receivers' previous
// step, so charging it whole (pipe-bd) overestimates the step more than splitting it (tandem). The README
// quotes the figures this prints.
TEST(PlanModels, TandemPredictsTheSimulatedStepOfTheChosenPlanBetter) {
  Generator gen(tandem::testing::fresh_seed());
  const int k = 6, w = 4, steps = 24;
  double err_tandem = 0, err_paper = 0;
  int plans = 0;
  for (int rep = 0; rep < 300; ++rep) {
    const BlockProfile p = random_profile(k, w, 240, gen);
    for (PlanModel model : {PlanModel::Tandem, PlanModel::PipeBD}) {
      const Plan plan = plan_hybrid(p, w, 0, model);
      const double tandem = plan_time(p, plan, PlanModel::Tandem), paper = plan_time(p, plan, PlanModel::PipeBD);
      if (tandem == paper) continue;
      DistillSchedule d =
          build_schedule(pipeline_layout(Strategy::AHD, plan, k, w), p.batch, steps, steps, row_bytes(k));
      apply_costs(d, p);
      const SimResult r = simulate(d.schedule);
      std::vector<double> step_end(steps, 0.0);  // the last update of each step
      for (const Instr& i : d.schedule.instrs())
        if (i.kind == OpKind::Update) step_end[i.step] = std::max(step_end[i.step], r.times[i.id].end_s);
      const double step = (step_end[steps - 1] - step_end[0]) / (steps - 1);
      err_tandem += std::abs(tandem - step) / step;
      err_paper += std::abs(paper - step) / step;
      ++plans;
    }
  }
  ASSERT_GE(plans, 50) << "too few plans where the models' predictions differ";
  std::printf("over %d plans: mean |predicted - simulated| / simulated step: tandem %.2f%%, pipe-bd %.2f%%\n", plans,
              100 * err_tandem / plans, 100 * err_paper / plans);
  EXPECT_LT(err_tandem, err_paper);
}

}  // namespace
}  // namespace bd
}  // namespace parallel
}  // namespace tandem
