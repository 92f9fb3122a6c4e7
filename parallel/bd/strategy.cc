// Strategy names and layouts.
#include "parallel/bd/strategy.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/base/spec_reader.h"

namespace tandem {
namespace parallel {
namespace bd {

const char* strategy_name(Strategy s) {
  switch (s) {
    case Strategy::DP: return "dp";
    case Strategy::LS: return "ls";
    case Strategy::TR: return "tr";
    case Strategy::DPU: return "dpu";
    case Strategy::AHD: return "ahd";
  }
  return "?";
}

const char* strategy_title(Strategy s) {
  switch (s) {
    case Strategy::DP: return "DP";
    case Strategy::LS: return "LS";
    case Strategy::TR: return "TR";
    case Strategy::DPU: return "TR+DPU";
    case Strategy::AHD: return "TR+DPU+AHD";
  }
  return "?";
}

std::vector<Strategy> all_strategies() {
  return {Strategy::DP, Strategy::LS, Strategy::TR, Strategy::DPU, Strategy::AHD};
}

std::vector<Strategy> parse_strategies(const std::string& spec) {
  if (spec == "all") return all_strategies();
  const SpecReader r("strategies", spec, "dp, ls, tr, dpu, ahd, a comma-separated list of them, or all");
  std::vector<std::pair<std::string, Strategy>> names;
  for (Strategy s : all_strategies()) names.emplace_back(strategy_name(s), s);
  std::vector<Strategy> out;
  for (const std::string& item : r.items(spec, ',')) {
    const Strategy s = r.choice("strategy", item, names);
    if (std::find(out.begin(), out.end(), s) != out.end()) r.fail("strategy '", item, "' is named twice");
    out.push_back(s);
  }
  if (out.empty()) r.fail("no strategy given");
  return out;
}

std::vector<int> Layout::blocks_of(int worker) const {
  TD_CHECK_INDEX(worker >= 0 && worker < workers, "worker ", worker, " is out of range for ", workers, " workers");
  std::vector<int> out;
  if (strategy == Strategy::DP) {
    for (int b = 0; b < blocks; ++b) out.push_back(b);
  } else if (strategy == Strategy::LS) {
    out = bins.at(static_cast<size_t>(worker));
  } else {
    const Stage& s = plan.stages.at(static_cast<size_t>(stage_of(worker)));
    for (int b = s.first; b <= s.last; ++b) out.push_back(b);
  }
  return out;
}

int Layout::stage_of(int worker) const {
  TD_CHECK(pipelined(), strategy_title(strategy), " has no pipeline stages");
  int next = 0;
  for (size_t i = 0; i < plan.stages.size(); ++i) {
    next += plan.stages[i].replicas;
    if (worker < next) return static_cast<int>(i);
  }
  TD_THROW(IndexError, "worker ", worker, " is outside the plan's ", next, " workers");
}

int Layout::replica_of(int worker) const {
  int stage = stage_of(worker);
  return worker - plan.stage_ranks()[static_cast<size_t>(stage)][0];
}

std::string Layout::describe() const {
  std::ostringstream os;
  os << strategy_title(strategy) << ": ";
  if (strategy == Strategy::DP) {
    os << blocks << " blocks one after another, each data-parallel on " << workers << " workers";
  } else if (strategy == Strategy::LS) {
    for (int w = 0; w < workers; ++w) {
      os << "w" << w << "{";
      for (size_t i = 0; i < bins[w].size(); ++i) os << (i ? "," : "") << bins[w][i];
      os << "} ";
    }
  } else {
    for (const Stage& s : plan.stages) {
      os << "[blocks " << s.first;
      if (s.last != s.first) os << "-" << s.last;
      os << "]x" << s.replicas << " ";
    }
  }
  std::string out = os.str();
  while (!out.empty() && out.back() == ' ') out.pop_back();
  return out;
}

Layout dp_layout(int blocks, int workers) {
  TD_CHECK(blocks >= 1 && workers >= 1, "DP needs at least one block and one worker");
  Layout l;
  l.strategy = Strategy::DP;
  l.blocks = blocks;
  l.workers = workers;
  return l;
}

Layout ls_layout(const BlockProfile& p, int workers) {
  TD_CHECK(workers >= 1, "LS needs at least one worker");
  std::vector<double> cost(static_cast<size_t>(p.blocks()));
  double prefix = 0;
  for (int b = 0; b < p.blocks(); ++b) {
    prefix += p.teacher_s[0][b];
    cost[b] = prefix + p.student_s[0][b];
  }
  Layout l;
  l.strategy = Strategy::LS;
  l.blocks = p.blocks();
  l.workers = workers;
  l.bins = pack_blocks(cost, workers);
  return l;
}

Layout pipeline_layout(Strategy strategy, const Plan& plan, int blocks, int workers) {
  TD_CHECK(strategy == Strategy::TR || strategy == Strategy::DPU || strategy == Strategy::AHD, strategy_title(strategy),
           " does not run on a pipeline plan");
  Plan checked = Plan::from_json(plan.to_json(), blocks, workers);
  if (strategy != Strategy::AHD)
    for (const Stage& s : checked.stages)
      TD_CHECK(s.replicas == 1, strategy_title(strategy), " runs one worker per stage; the plan replicates blocks ",
               s.first, "-", s.last, " ", s.replicas, " times (only TR+DPU+AHD replicates stages)");
  Layout l;
  l.strategy = strategy;
  l.blocks = blocks;
  l.workers = workers;
  l.plan = checked;
  return l;
}

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
