// The AHD planner (dynamic programming over contiguous stages and replication factors), LS bin packing,
// and plans as JSON.
#include "parallel/bd/plan.h"

#include <algorithm>
#include <cstdio>
#include <limits>
#include <numeric>
#include <sstream>

#include "runtime/error.h"

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
  for (const Json& row : j.as_array(what)) {
    std::vector<double> r;
    for (const Json& v : row.as_array(what)) r.push_back(v.as_number(what));
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
  if (b >= (1ll << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / 1073741824.0);
  else std::snprintf(buf, sizeof buf, "%.1f MiB", b / 1048576.0);
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
    for (int64_t v : row) r.push_back(static_cast<double>(v));
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
  if (batch > 0) j["batch"] = batch;
  return j;
}

BlockProfile BlockProfile::from_json(const Json& j) {
  BlockProfile p;
  p.teacher_s = matrix_from(j.at("teacher_s"), "teacher_s");
  p.student_s = matrix_from(j.at("student_s"), "student_s");
  p.allreduce_s = matrix_from(j.at("allreduce_s"), "allreduce_s");
  for (const auto& row : matrix_from(j.at("memory"), "memory")) {
    std::vector<int64_t> r;
    for (double v : row) r.push_back(static_cast<int64_t>(v));
    p.memory.push_back(r);
  }
  for (const Json& v : j.at("relay_s").as_array("relay_s")) p.relay_s.push_back(v.as_number("relay_s"));
  if (j.has("load_s"))
    for (const Json& v : j.at("load_s").as_array("load_s")) p.load_s.push_back(v.as_number("load_s"));
  if (j.has("batch")) p.batch = j.at("batch").as_int("batch");
  size_t k = p.relay_s.size(), g = p.teacher_s.size();
  TD_CHECK(k > 0 && g > 0, "a block profile needs at least one block and one replication factor");
  for (const auto* m : {&p.teacher_s, &p.student_s, &p.allreduce_s}) {
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
  j["peak_memory"] = static_cast<double>(peak_memory);
  return j;
}

Plan Plan::from_json(const Json& j, int blocks, int workers) {
  Plan p;
  for (const Json& s : j.at("stages").as_array("stages")) {
    Stage st;
    st.first = static_cast<int>(s.at("first").as_int("stage first"));
    st.last = static_cast<int>(s.at("last").as_int("stage last"));
    st.replicas = static_cast<int>(s.at("replicas").as_int("stage replicas"));
    p.stages.push_back(st);
  }
  if (j.has("bottleneck_s")) p.bottleneck_s = j.at("bottleneck_s").as_number("bottleneck_s");
  if (j.has("peak_memory")) p.peak_memory = j.at("peak_memory").as_int("peak_memory");
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

double stage_time(const BlockProfile& p, const Stage& s) {
  int g = s.replicas - 1;
  TD_CHECK(g >= 0 && g < p.max_replicas(), "no profile for ", s.replicas, " replicas (profiled up to ",
           p.max_replicas(), ")");
  double t = 0;
  for (int b = s.first; b <= s.last; ++b) t += p.teacher_s[g][b] + p.student_s[g][b] + p.allreduce_s[g][b];
  if (s.first > 0) t += p.relay_s[s.first - 1] / s.replicas;
  return t;
}

int64_t stage_memory(const BlockProfile& p, const Stage& s) {
  int64_t m = 0;
  for (int b = s.first; b <= s.last; ++b) m += p.memory[s.replicas - 1][b];
  return m;
}

namespace {
// dp over (blocks covered, workers used) minimizing the bottleneck; `max_g` bounds the replicas per stage.
Plan search(const BlockProfile& p, int workers, int64_t memory_limit, int max_g, const char* what) {
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
          double cand = std::max(dp[a][w - g], stage_time(p, s));
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
}  // namespace

Plan plan_hybrid(const BlockProfile& p, int workers, int64_t memory_limit) {
  TD_CHECK(workers >= 1, "planning needs at least one worker");
  return search(p, workers, memory_limit, p.max_replicas(), "hybrid");
}

Plan plan_pipeline(const BlockProfile& p, int workers, int64_t memory_limit) {
  TD_CHECK(workers >= 1, "planning needs at least one worker");
  TD_CHECK(workers <= p.blocks(), "a pipeline of ", workers, " stages needs at least ", workers,
           " blocks, the model has ", p.blocks(), " (use fewer workers or the hybrid plan)");
  return search(p, workers, memory_limit, 1, "pipeline");
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
