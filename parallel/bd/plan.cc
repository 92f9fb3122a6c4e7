// The AHD planner (dynamic programming over contiguous stages and replication factors), LS bin packing,
// and plans as JSON.
#include "parallel/bd/plan.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <nlohmann/json.hpp>
#include <numeric>
#include <sstream>

#include "runtime/base/error.h"

namespace tandem {
namespace parallel {
namespace bd {

namespace {
Json matrix_json(const std::vector<std::vector<double>>& m) {
  Json a = Json::array();
  for (const auto& row : m) {
    Json r = Json::array();
    for (double v : row) r.push_back(v);
    a.push_back(r);
  }
  return a;
}
std::vector<std::vector<double>> matrix_from(const Json& j, const std::string& what) {
  std::vector<std::vector<double>> m;
  for (const Json& row : json_array(j, what)) {
    std::vector<double> r;
    for (const Json& v : json_array(row, what)) r.push_back(json_number(v, what));
    m.push_back(r);
  }
  return m;
}
std::string format_ms(double s) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.2f ms", s * 1e3);
  return buf;
}
std::string format_bytes(int64_t b) {
  char buf[32];
  if (b >= (1ll << 30))
    std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  else
    std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
  return buf;
}
}  // namespace

Json BlockProfile::to_json() const {
  Json j = Json::object();
  j["teacher_s"] = matrix_json(teacher_s);
  j["student_s"] = matrix_json(student_s);
  j["allreduce_s"] = matrix_json(allreduce_s);
  Json mem = Json::array();
  for (const auto& row : memory) {
    Json r = Json::array();
    for (int64_t v : row) r.push_back(v);
    mem.push_back(r);
  }
  j["memory"] = mem;
  Json relay = Json::array();
  for (double v : relay_s) relay.push_back(v);
  j["relay_s"] = relay;
  if (!load_s.empty()) {
    Json load = Json::array();
    for (double v : load_s) load.push_back(v);
    j["load_s"] = load;
  }
  if (!teacher_host_s.empty()) {
    j["teacher_host_s"] = matrix_json(teacher_host_s);
    j["student_host_s"] = matrix_json(student_host_s);
  }
  if (batch > 0) j["batch"] = batch;
  return j;
}

BlockProfile BlockProfile::from_json(const Json& j) {
  BlockProfile p;
  p.teacher_s = matrix_from(json_at(j, "teacher_s"), "teacher_s");
  p.student_s = matrix_from(json_at(j, "student_s"), "student_s");
  p.allreduce_s = matrix_from(json_at(j, "allreduce_s"), "allreduce_s");
  for (const auto& row : matrix_from(json_at(j, "memory"), "memory")) {
    std::vector<int64_t> r;
    for (double v : row) r.push_back(static_cast<int64_t>(v));
    p.memory.push_back(r);
  }
  for (const Json& v : json_array(json_at(j, "relay_s"), "relay_s")) p.relay_s.push_back(json_number(v, "relay_s"));
  if (j.contains("load_s"))
    for (const Json& v : json_array(json_at(j, "load_s"), "load_s")) p.load_s.push_back(json_number(v, "load_s"));
  if (j.contains("teacher_host_s")) {
    p.teacher_host_s = matrix_from(json_at(j, "teacher_host_s"), "teacher_host_s");
    p.student_host_s = matrix_from(json_at(j, "student_host_s"), "student_host_s");
  }
  if (j.contains("batch")) p.batch = json_int(json_at(j, "batch"), "batch");
  size_t k = p.relay_s.size(), g = p.teacher_s.size();
  TD_CHECK(k > 0 && g > 0, "a block profile needs at least one block and one replication factor");
  for (const auto* m : {&p.teacher_s, &p.student_s, &p.allreduce_s, &p.teacher_host_s, &p.student_host_s}) {
    if (m->empty() && (m == &p.teacher_host_s || m == &p.student_host_s)) continue;  // host times not modelled
    TD_CHECK(m->size() == g, "block profile: every table needs ", g, " rows (one per replication factor)");
    for (const auto& row : *m) TD_CHECK(row.size() == k, "block profile: every row needs ", k, " blocks");
  }
  TD_CHECK(p.memory.size() == g, "block profile: memory needs ", g, " rows");
  for (const auto& row : p.memory) TD_CHECK(row.size() == k, "block profile: every row needs ", k, " blocks");
  TD_CHECK(p.load_s.empty() || p.load_s.size() == g, "block profile: load_s needs ", g, " entries");
  return p;
}

int Plan::workers() const {
  int n = 0;
  for (const Stage& s : stages) n += s.replicas;
  return n;
}

std::vector<std::vector<int>> Plan::stage_ranks() const {
  std::vector<std::vector<int>> out;
  int next = 0;
  for (const Stage& s : stages) {
    out.emplace_back();
    for (int r = 0; r < s.replicas; ++r) out.back().push_back(next++);
  }
  return out;
}

std::string Plan::describe() const {
  std::ostringstream os;
  for (const Stage& s : stages) {
    os << "[blocks " << s.first;
    if (s.last != s.first) os << "-" << s.last;
    os << "]x" << s.replicas << " ";
  }
  os << " bottleneck " << format_ms(bottleneck_s);
  if (peak_memory > 0) os << ", peak " << format_bytes(peak_memory) << " per worker";
  return os.str();
}

Json Plan::to_json() const {
  Json j = Json::object();
  Json st = Json::array();
  for (const Stage& s : stages) {
    Json o = Json::object();
    o["first"] = s.first;
    o["last"] = s.last;
    o["replicas"] = s.replicas;
    st.push_back(o);
  }
  j["stages"] = st;
  j["bottleneck_s"] = bottleneck_s;
  j["peak_memory"] = peak_memory;
  return j;
}

Plan Plan::from_json(const Json& j, int blocks, int workers) {
  Plan p;
  for (const Json& s : json_array(json_at(j, "stages"), "stages")) {
    Stage st;
    st.first = static_cast<int>(json_int(json_at(s, "first"), "stage first"));
    st.last = static_cast<int>(json_int(json_at(s, "last"), "stage last"));
    st.replicas = static_cast<int>(json_int(json_at(s, "replicas"), "stage replicas"));
    p.stages.push_back(st);
  }
  if (j.contains("bottleneck_s")) p.bottleneck_s = json_number(json_at(j, "bottleneck_s"), "bottleneck_s");
  if (j.contains("peak_memory")) p.peak_memory = json_int(json_at(j, "peak_memory"), "peak_memory");
  TD_CHECK(!p.stages.empty(), "a plan needs at least one stage");
  int expect = 0;
  for (size_t i = 0; i < p.stages.size(); ++i) {
    const Stage& s = p.stages[i];
    TD_CHECK(s.first == expect && s.last >= s.first, "plan stage ", i, " covers blocks ", s.first, "-", s.last,
             " but should start at block ", expect, " (stages must be contiguous and ordered)");
    TD_CHECK(s.replicas >= 1, "plan stage ", i, " has ", s.replicas, " replicas");
    expect = s.last + 1;
  }
  TD_CHECK(expect == blocks, "the plan covers blocks 0-", expect - 1, " but the model has ", blocks, " blocks");
  TD_CHECK(p.workers() == workers, "the plan uses ", p.workers(), " workers but ", workers, " are given");
  return p;
}

const char* plan_model_name(PlanModel m) { return m == PlanModel::PipeBD ? "pipe-bd" : "tandem"; }

PlanModel parse_plan_model(const std::string& name) {
  if (name == "tandem") return PlanModel::Tandem;
  if (name == "pipe-bd") return PlanModel::PipeBD;
  TD_THROW(ValueError, "unknown plan model '", name, "' (known: tandem, pipe-bd)");
}

double stage_time(const BlockProfile& p, const Stage& s, PlanModel model) {
  int g = s.replicas - 1;
  TD_CHECK(g >= 0 && g < p.max_replicas(), "no profile for ", s.replicas, " replicas (profiled up to ",
           p.max_replicas(), ")");
  double t = 0;
  if (model == PlanModel::Tandem) {
    for (int b = s.first; b <= s.last; ++b) t += p.teacher_s[g][b] + p.student_s[g][b] + p.allreduce_s[g][b];
    if (s.first > 0) t += p.relay_s[s.first - 1] / s.replicas;
    return t;
  }
  // The paper code's sums, in its order: per block the step time, then (replicated) the all-reduce; the
  // relay last. A stage of one worker has no all-reduce (its profiled entry is zero there).
  for (int b = s.first; b <= s.last; ++b) {
    t += p.teacher_s[g][b] + p.student_s[g][b];
    if (s.replicas > 1) t += p.allreduce_s[g][b];
  }
  if (s.first > 0) t += p.relay_s[s.first - 1];
  return t;
}

double plan_time(const BlockProfile& p, const Plan& plan, PlanModel model) {
  double worst = 0;
  for (const Stage& s : plan.stages) worst = std::max(worst, stage_time(p, s, model));
  return worst;
}

int64_t stage_memory(const BlockProfile& p, const Stage& s) {
  int64_t m = 0;
  for (int b = s.first; b <= s.last; ++b) m += p.memory[s.replicas - 1][b];
  return m;
}

namespace {
// dp over (blocks covered, workers used) minimizing the bottleneck; `max_g` bounds the replicas per stage.
Plan search(const BlockProfile& p, int workers, int64_t memory_limit, int max_g, PlanModel model, const char* what) {
  const int k = p.blocks();
  const double inf = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> dp(k + 1, std::vector<double>(workers + 1, inf));
  std::vector<std::vector<std::pair<int, int>>> choice(k + 1, std::vector<std::pair<int, int>>(workers + 1, {-1, -1}));
  dp[0][0] = 0;
  for (int b = 1; b <= k; ++b)
    for (int w = 1; w <= workers; ++w)
      for (int a = 0; a < b; ++a)
        for (int g = 1; g <= std::min(max_g, w); ++g) {
          if (dp[a][w - g] == inf) continue;
          Stage s{a, b - 1, g};
          if (memory_limit > 0 && stage_memory(p, s) > memory_limit) continue;
          double cand = std::max(dp[a][w - g], stage_time(p, s, model));
          if (cand < dp[b][w]) {
            dp[b][w] = cand;
            choice[b][w] = {a, g};
          }
        }
  if (dp[k][workers] == inf) {
    if (memory_limit > 0)
      TD_THROW(ValueError, "no ", what, " plan of ", k, " blocks on ", workers, " workers fits the memory limit of ",
               format_bytes(memory_limit), " per worker");
    TD_THROW(ValueError, "no ", what, " plan of ", k, " blocks on ", workers, " workers exists",
             max_g == 1 ? " (a pipeline needs at least as many blocks as workers)" : "");
  }
  Plan plan;
  for (int b = k, w = workers; b > 0;) {
    auto [a, g] = choice[b][w];
    plan.stages.insert(plan.stages.begin(), Stage{a, b - 1, g});
    b = a;
    w -= g;
  }
  plan.bottleneck_s = dp[k][workers];
  for (const Stage& s : plan.stages) plan.peak_memory = std::max(plan.peak_memory, stage_memory(p, s));
  return plan;
}

// Among the plans of `workers` workers (replicas up to `max_g`) whose every stage costs at most `best` under
// PipeBD, the first in the paper code's order: stage counts `workers` (the pure pipelines), then 1, 2, ...;
// per count, group sizes in descending lexicographic order; per group sizes, cut points ascending. With
// `best` the optimum this is the plan its strict less-than search keeps. Rather than enumerating every plan,
// each choice takes the first option from which some completion stays within `best`.
Plan first_in_paper_order(const BlockProfile& p, int workers, int max_g, double best, bool pipelines_only) {
  const int k = p.blocks();
  // fits[a][e][g - 1]: stage a..e on g replicas costs at most `best`.
  std::vector<std::vector<std::vector<char>>> fits(k, std::vector<std::vector<char>>(k, std::vector<char>(max_g, 0)));
  for (int a = 0; a < k; ++a)
    for (int e = a; e < k; ++e)
      for (int g = 1; g <= max_g; ++g) fits[a][e][g - 1] = stage_time(p, Stage{a, e, g}, PlanModel::PipeBD) <= best;
  std::vector<int> counts;
  if (workers <= k) counts.push_back(workers);
  if (!pipelines_only)
    for (int n = 1; n < workers && n <= k; ++n) counts.push_back(n);
  for (int n : counts) {
    // done[m][b][u]: m stages can cover blocks b..k-1 with exactly u workers, each stage within `best`.
    std::vector<std::vector<std::vector<char>>> done(
        n + 1, std::vector<std::vector<char>>(k + 1, std::vector<char>(workers + 1, 0)));
    done[0][k][0] = 1;
    for (int m = 1; m <= n; ++m)
      for (int b = 0; b < k; ++b)
        for (int u = 1; u <= workers; ++u)
          for (int e = b; e < k && !done[m][b][u]; ++e)
            for (int g = 1; g <= std::min(max_g, u); ++g)
              if (fits[b][e][g - 1] && done[m - 1][e + 1][u - g]) {
                done[m][b][u] = 1;
                break;
              }
    if (!done[n][0][workers]) continue;
    // Group sizes, largest first at each position, keeping the blocks the chosen prefix can reach.
    std::vector<int> sizes;
    std::vector<char> reach(k + 1, 0);
    reach[0] = 1;
    for (int i = 0, left = workers; i < n; ++i) {
      const int m = n - i;  // stages still to size, this one included
      for (int g = std::min(max_g, left - (m - 1)); g >= 1; --g) {
        std::vector<char> next(k + 1, 0);
        bool completes = false;
        for (int b = 0; b < k; ++b)
          for (int e = b; e < k; ++e)
            if (reach[b] && fits[b][e][g - 1]) {
              next[e + 1] = 1;
              completes = completes || done[m - 1][e + 1][left - g];
            }
        if (!completes) continue;
        sizes.push_back(g);
        reach = next;
        left -= g;
        break;
      }
    }
    // Cut points: each stage ends as early as the stages after it allow.
    std::vector<std::vector<char>> rest(n + 1, std::vector<char>(k + 1, 0));  // stages i.. cover b..k-1
    rest[n][k] = 1;
    for (int i = n - 1; i >= 0; --i)
      for (int b = 0; b < k; ++b)
        for (int e = b; e < k; ++e) rest[i][b] = rest[i][b] || (fits[b][e][sizes[i] - 1] && rest[i + 1][e + 1]);
    Plan plan;
    for (int i = 0, b = 0; i < n; ++i) {
      int e = b;
      while (!(fits[b][e][sizes[i] - 1] && rest[i + 1][e + 1])) ++e;
      plan.stages.push_back(Stage{b, e, sizes[i]});
      b = e + 1;
    }
    plan.bottleneck_s = best;
    for (const Stage& s : plan.stages) plan.peak_memory = std::max(plan.peak_memory, stage_memory(p, s));
    return plan;
  }
  TD_THROW(InternalError, "no plan within the optimum ", best, " was found in the paper's order");
}

Plan plan_with(const BlockProfile& p, int workers, int64_t memory_limit, PlanModel model, int max_g, const char* what) {
  if (model == PlanModel::Tandem) return search(p, workers, memory_limit, max_g, model, what);
  TD_CHECK(memory_limit == 0,
           "the pipe-bd plan model has no memory limit (as the paper's planner); use the "
           "tandem model to plan under one");
  const double best = search(p, workers, 0, max_g, model, what).bottleneck_s;
  return first_in_paper_order(p, workers, max_g, best, max_g == 1);
}
}  // namespace

Plan plan_hybrid(const BlockProfile& p, int workers, int64_t memory_limit, PlanModel model) {
  TD_CHECK(workers >= 1, "planning needs at least one worker");
  return plan_with(p, workers, memory_limit, model, p.max_replicas(), "hybrid");
}

Plan plan_pipeline(const BlockProfile& p, int workers, int64_t memory_limit, PlanModel model) {
  TD_CHECK(workers >= 1, "planning needs at least one worker");
  TD_CHECK(workers <= p.blocks(), "a pipeline of ", workers, " stages needs at least ", workers,
           " blocks, the model has ", p.blocks(), " (use fewer workers or the hybrid plan)");
  return plan_with(p, workers, memory_limit, model, 1, "pipeline");
}

std::vector<std::vector<int>> pack_blocks(const std::vector<double>& cost, int workers) {
  TD_CHECK(workers >= 1, "bin packing needs at least one worker");
  std::vector<int> order(cost.size());
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(), [&](int a, int b) { return cost[a] > cost[b]; });
  std::vector<double> load(workers, 0.0);
  std::vector<std::vector<int>> bins(workers);
  for (int b : order) {
    int w = static_cast<int>(std::min_element(load.begin(), load.end()) - load.begin());
    bins[w].push_back(b);
    load[w] += cost[b];
  }
  for (auto& bin : bins) std::sort(bin.begin(), bin.end());
  return bins;
}

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
