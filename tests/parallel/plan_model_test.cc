// Tests of the AHD planner's pipe-bd model against the paper code's planner, written here as its cost rules
// and its search: every plan in its order, kept under a strict less-than.
#include <gtest/gtest.h>

#include <functional>
#include <limits>
#include <string>

#include "parallel/bd/plan.h"
#include "runtime/base/error.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace bd {
namespace {

using Stages = std::vector<Stage>;

// Costs for `blocks` blocks and group sizes 1..max_g: per block a work that g workers split, with some
// noise, and all-reduces over g > 1. Relays are large next to the blocks, so that a replicated stage
// receiving one is often the bottleneck (where the two models part). `dyadic`: every value a multiple of 1/8
// from a few choices instead, so that sums are exact and many plans tie.
BlockProfile paper_profile(int blocks, int max_g, Generator& gen, bool dyadic) {
  auto noise = [&] { return 0.8 + 0.4 * gen.uniform(); };
  auto eighths = [&] { return (1 + static_cast<int>(gen.uniform() * 4)) / 8.0; };
  BlockProfile p;
  std::vector<double> work(blocks);
  for (int b = 0; b < blocks; ++b) {
    work[b] = 0.003 + 0.04 * gen.uniform();
    p.relay_s.push_back(dyadic ? eighths() : 0.002 + 0.02 * gen.uniform());
  }
  for (int g = 1; g <= max_g; ++g) {
    std::vector<double> t(blocks), s(blocks), ar(blocks);
    for (int b = 0; b < blocks; ++b) {
      t[b] = dyadic ? eighths() : 0.3 * work[b] / g * noise();
      s[b] = dyadic ? eighths() : work[b] / g * noise();
      ar[b] = g == 1 ? 0 : dyadic ? eighths() : 0.003 * gen.uniform();
    }
    p.teacher_s.push_back(t);
    p.student_s.push_back(s);
    p.allreduce_s.push_back(ar);
    p.memory.push_back(std::vector<int64_t>(blocks, 1 << 20));
  }
  return p;
}

// The paper code's cost of a plan: per stage, its blocks' teacher + student (+ all-reduce when replicated)
// at batch B/g plus the full-batch relay into it; the plan: its slowest stage.
double paper_cost(const BlockProfile& p, const Stages& plan) {
  double worst = 0;
  for (const Stage& st : plan) {
    const int g = st.replicas;
    double stage = st.first > 0 ? p.relay_s[st.first - 1] : 0;
    for (int b = st.first; b <= st.last; ++b)
      stage += p.teacher_s[g - 1][b] + p.student_s[g - 1][b] + (g > 1 ? p.allreduce_s[g - 1][b] : 0);
    if (stage > worst) worst = stage;
  }
  return worst;
}

// Every plan in the paper code's search order: the pure pipelines (stage count = workers), then stage counts
// 1, 2, ...; for each count the group sizes (each 1..max_g) in descending lexicographic order; for each, the
// cut points in ascending lexicographic order.
std::vector<Stages> plans_in_paper_order(int blocks, int workers, int max_g) {
  std::vector<Stages> out;
  std::vector<int> counts;
  if (workers <= blocks) counts.push_back(workers);
  for (int n = 1; n < workers && n <= blocks; ++n) counts.push_back(n);
  for (int n : counts) {
    std::vector<std::vector<int>> group_sizes;
    std::vector<int> sizes;
    std::function<void(int)> size = [&](int left) {
      if (static_cast<int>(sizes.size()) == n) {
        if (left == 0) group_sizes.push_back(sizes);
        return;
      }
      for (int g = std::min(left, max_g); g >= 1; --g) {
        sizes.push_back(g);
        size(left - g);
        sizes.pop_back();
      }
    };
    size(workers);
    for (const std::vector<int>& gs : group_sizes) {
      Stages stages;
      std::function<void(int)> cut = [&](int first) {
        const int i = static_cast<int>(stages.size());
        if (i == n - 1) {
          stages.push_back({first, blocks - 1, gs[i]});
          out.push_back(stages);
          stages.pop_back();
          return;
        }
        for (int last = first; last <= blocks - (n - i); ++last) {
          stages.push_back({first, last, gs[i]});
          cut(last + 1);
          stages.pop_back();
        }
      };
      cut(0);
    }
  }
  return out;
}

// The paper code's choice: the first plan whose cost is strictly below every earlier one's.
Stages paper_choice(const BlockProfile& p, int workers, bool pipelines_only = false) {
  double best = std::numeric_limits<double>::infinity();
  Stages chosen;
  for (const Stages& plan : plans_in_paper_order(p.blocks(), workers, p.max_replicas())) {
    if (pipelines_only && static_cast<int>(plan.size()) != workers) continue;
    const double c = paper_cost(p, plan);
    if (c < best) {
      best = c;
      chosen = plan;
    }
  }
  return chosen;
}

std::string show(const Stages& plan) {
  std::string s;
  for (const Stage& st : plan)
    s += "[" + std::to_string(st.first) + "-" + std::to_string(st.last) + "]x" + std::to_string(st.replicas) + " ";
  return s;
}

bool same(const Stages& a, const Stages& b) { return show(a) == show(b); }

// The order above, at 4 workers and 6 blocks, visits the group sizes in the order of the paper code's
// loops (arch_search.py schedule(): 1+1+1+1, then 4, then 3+1, 2+2, 1+3, then 2+1+1, 1+2+1, 1+1+2), and
// every contiguous split of each once.
TEST(PlanModel, TheReferenceOrderIsThePaperCodesAtFourWorkers) {
  std::vector<std::vector<int>> seen;
  int plans = 0;
  for (const Stages& plan : plans_in_paper_order(6, 4, 4)) {
    std::vector<int> gs;
    for (const Stage& st : plan) gs.push_back(st.replicas);
    if (seen.empty() || seen.back() != gs) seen.push_back(gs);
    ++plans;
  }
  EXPECT_EQ(seen, (std::vector<std::vector<int>>{
                      {1, 1, 1, 1}, {4}, {3, 1}, {2, 2}, {1, 3}, {2, 1, 1}, {1, 2, 1}, {1, 1, 2}}));
  EXPECT_EQ(plans, 10 + 1 + 3 * 5 + 3 * 10);  // C(5,3) pipelines, 1, 3 x C(5,1), 3 x C(5,2)
}

// A case by hand (3 workers, 2 blocks; costs in units): block 0 costs 1 alone and 1/2 on two workers, block 1
// 2 and 1, both 1/2 + 5/4 on three, and the relay of block 0's output 1. Tandem splits the relay over the
// receivers: [0]x1 [1]x2 costs max(1, 1 + 1/2) = 1.5 < [0-1]x3's 1.75. The paper charges it whole:
// [0]x1 [1]x2 costs 2, and [0-1]x3 wins.
TEST(PlanModel, TheModelsDifferOnAReplicatedStageThatReceivesARelay) {
  BlockProfile p;
  p.teacher_s = {{0, 0}, {0, 0}, {0, 0}};
  p.student_s = {{1, 2}, {0.5, 1}, {0.5, 1.25}};
  p.allreduce_s = {{0, 0}, {0, 0}, {0, 0}};
  p.memory = {{1, 1}, {1, 1}, {1, 1}};
  p.relay_s = {1, 0};
  const Plan tandem = plan_hybrid(p, 3, 0, PlanModel::Tandem);
  const Plan paper = plan_hybrid(p, 3, 0, PlanModel::PipeBD);
  EXPECT_EQ(show(tandem.stages), "[0-0]x1 [1-1]x2 ");
  EXPECT_DOUBLE_EQ(tandem.bottleneck_s, 1.5);
  EXPECT_EQ(show(paper.stages), "[0-1]x3 ");
  EXPECT_DOUBLE_EQ(paper.bottleneck_s, 1.75);
  EXPECT_DOUBLE_EQ(plan_time(p, tandem, PlanModel::PipeBD), 2.0);
  EXPECT_DOUBLE_EQ(plan_time(p, paper, PlanModel::Tandem), 1.75);
  // Ties go to the earlier plan: [0-1]x3 (one stage) before [0]x1 [1]x2 (two) at 2 ...
  p.student_s[2] = {0.75, 1.25};
  EXPECT_EQ(show(plan_hybrid(p, 3, 0, PlanModel::PipeBD).stages), "[0-1]x3 ");
  // ... and group sizes 2+1 before 1+2: with block 1 costing 2 on one worker or two (and three workers too
  // slow), [0]x2 [1]x1 and [0]x1 [1]x2 both cost 2 + 1 = 3.
  p.student_s = {{1, 2}, {0.5, 2}, {9, 9}};
  EXPECT_EQ(show(plan_hybrid(p, 3, 0, PlanModel::PipeBD).stages), "[0-0]x2 [1-1]x1 ");
  EXPECT_EQ(show(paper_choice(p, 3)), "[0-0]x2 [1-1]x1 ");
}

// Random 4-worker x 6-block profiles (the paper's setting): the pipe-bd model picks exactly the paper code's
// plan, also where Tandem's model picks another, which then costs more under the paper's rules.
TEST(PlanModel, PipeBdReproducesThePaperPlannerWhereTheModelsDiffer) {
  Generator gen(tandem::testing::fresh_seed());
  int differ = 0, draws = 0;
  for (; draws < 2000 && differ < 30; ++draws) {
    const BlockProfile p = paper_profile(6, 4, gen, false);
    const Stages want = paper_choice(p, 4);
    const Plan got = plan_hybrid(p, 4, 0, PlanModel::PipeBD);
    ASSERT_TRUE(same(got.stages, want)) << "draw " << draws << ": got " << show(got.stages) << ", the paper's "
                                        << show(want);
    EXPECT_DOUBLE_EQ(got.bottleneck_s, paper_cost(p, want));
    const Plan tandem = plan_hybrid(p, 4, 0, PlanModel::Tandem);
    if (!same(tandem.stages, want) && paper_cost(p, tandem.stages) > paper_cost(p, want)) ++differ;
  }
  EXPECT_GE(differ, 30) << "only " << differ << " of " << draws << " profiles told the models apart";
}

// Other sizes, and profiles with many exact ties (dyadic costs): the first plan in the paper's order wins.
TEST(PlanModel, PipeBdKeepsTheFirstOfEqualPlansInThePaperOrderAtAnySize) {
  Generator gen(tandem::testing::fresh_seed());
  int tied = 0;
  for (auto [k, w] : {std::pair<int, int>{6, 4}, {5, 3}, {4, 5}, {6, 6}, {7, 2}, {3, 4}, {8, 5}})
    for (bool dyadic : {false, true})
      for (int rep = 0; rep < 20; ++rep) {
        const BlockProfile p = paper_profile(k, w, gen, dyadic);
        const Stages want = paper_choice(p, w);
        const Plan got = plan_hybrid(p, w, 0, PlanModel::PipeBD);
        ASSERT_TRUE(same(got.stages, want)) << k << " blocks, " << w << " workers" << (dyadic ? ", dyadic" : "")
                                            << ": got " << show(got.stages) << ", the paper's " << show(want);
        int optimal = 0;
        for (const Stages& plan : plans_in_paper_order(k, w, w)) optimal += paper_cost(p, plan) == got.bottleneck_s;
        tied += optimal > 1;
        if (w <= k) {  // TR and DPU's pipeline: the first of the best pure pipelines
          const Plan pipe = plan_pipeline(p, w, 0, PlanModel::PipeBD);
          const Stages want_pipe = paper_choice(p, w, true);
          EXPECT_TRUE(same(pipe.stages, want_pipe)) << show(pipe.stages) << " vs " << show(want_pipe);
        }
      }
  EXPECT_GE(tied, 20) << "too few profiles with equal optimal plans to check the tie order";
}

TEST(PlanModel, NamesParseAndThePaperModelTakesNoMemoryLimit) {
  EXPECT_EQ(parse_plan_model("tandem"), PlanModel::Tandem);
  EXPECT_EQ(parse_plan_model("pipe-bd"), PlanModel::PipeBD);
  EXPECT_STREQ(plan_model_name(PlanModel::PipeBD), "pipe-bd");
  EXPECT_STREQ(plan_model_name(PlanModel::Tandem), "tandem");
  try {
    parse_plan_model("pipebd");
    FAIL() << "an unknown model name must throw";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("unknown plan model 'pipebd' (known: tandem, pipe-bd)"), std::string::npos)
        << e.what();
  }
  Generator gen(tandem::testing::fresh_seed());
  const BlockProfile p = paper_profile(6, 4, gen, false);
  try {
    plan_hybrid(p, 4, 1 << 30, PlanModel::PipeBD);
    FAIL() << "the pipe-bd model must refuse a memory limit";
  } catch (const ValueError& e) {
    EXPECT_NE(std::string(e.what()).find("no memory limit"), std::string::npos) << e.what();
  }
  EXPECT_THROW(plan_pipeline(p, 4, 1 << 30, PlanModel::PipeBD), ValueError);
}

}  // namespace
}  // namespace bd
}  // namespace parallel
}  // namespace tandem
