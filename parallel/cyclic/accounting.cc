// Activation and communication curves of cyclic-DP timelines.
#include "parallel/cyclic/accounting.h"

#include <algorithm>
#include <map>

#include "runtime/base/error.h"

namespace tandem {
namespace parallel {
namespace cyclic {

double Curve::peak() const {
  double p = 0;
  for (double x : v) p = std::max(p, x);
  return p;
}

double Curve::at(double time) const {
  auto it = std::upper_bound(t.begin(), t.end(), time);
  if (it == t.begin()) return 0;
  return v[static_cast<size_t>(it - t.begin()) - 1];
}

double Curve::mean(double from, double to) const {
  TD_CHECK(to > from, "Curve::mean needs from < to");
  double area = 0, cur = at(from), last = from;
  for (size_t i = 0; i < t.size(); ++i) {
    if (t[i] <= from) continue;
    if (t[i] >= to) break;
    area += cur * (t[i] - last);
    cur = v[i];
    last = t[i];
  }
  area += cur * (to - last);
  return area / (to - from);
}

void Curve::push(double time, double value) {
  if (!t.empty() && t.back() == time) {
    v.back() = value;
    return;
  }
  TD_ASSERT(t.empty() || time > t.back(), "Curve::push: times must increase");
  t.push_back(time);
  v.push_back(value);
}

Curve sum_curves(const std::vector<Curve>& curves) {
  std::vector<double> times;
  for (const Curve& c : curves) times.insert(times.end(), c.t.begin(), c.t.end());
  std::sort(times.begin(), times.end());
  times.erase(std::unique(times.begin(), times.end()), times.end());
  Curve out;
  for (double time : times) {
    double s = 0;
    for (const Curve& c : curves) s += c.at(time);
    out.push(time, s);
  }
  return out;
}

namespace {
// A step function from +/- deltas at times.
Curve from_deltas(std::multimap<double, double>& deltas) {
  Curve c;
  double cur = 0;
  for (auto it = deltas.begin(); it != deltas.end();) {
    double time = it->first;
    for (; it != deltas.end() && it->first == time; ++it) cur += it->second;
    c.push(time, cur);
  }
  return c;
}
}  // namespace

ActivationProfile stored_activations(const Timeline& timeline, const std::vector<InstrTime>& times,
                                     const std::vector<double>& stage_bytes, const Transients& transient) {
  const Schedule& s = timeline.schedule;
  TD_CHECK(static_cast<int>(stage_bytes.size()) == timeline.spec.stages, "stored_activations: ", stage_bytes.size(),
           " stage sizes for ", timeline.spec.stages, " stages");
  for (const auto* v : {&transient.forward_extra, &transient.backward_extra})
    TD_CHECK(v->empty() || v->size() == stage_bytes.size(), "stored_activations: ", v->size(), " transient sizes for ",
             stage_bytes.size(), " stages");
  std::vector<double> start(s.size(), 0), end(s.size(), 0);
  std::vector<bool> seen(s.size(), false);
  for (const InstrTime& t : times) {
    TD_CHECK(t.id >= 0 && static_cast<size_t>(t.id) < s.size(), "stored_activations: instruction ", t.id,
             " is not in the timeline");
    start[t.id] = t.start_s;
    end[t.id] = t.end_s;
    seen[t.id] = true;
  }
  std::map<std::tuple<int64_t, int, int>, int> forward;  // (round, micro, stage) -> forward id
  for (const Instr& i : s.instrs())
    if (timeline.actions[i.id].kind == ActionKind::Forward) {
      const Action& a = timeline.actions[i.id];
      forward[{a.round, a.micro, a.stage}] = i.id;
    }
  std::vector<std::multimap<double, double>> deltas(s.workers());
  for (const Instr& i : s.instrs()) {
    const Action& a = timeline.actions[i.id];
    if (a.kind != ActionKind::Backward) continue;
    int f = forward.at({a.round, a.micro, a.stage});
    TD_CHECK(seen[f] && seen[i.id], "stored_activations: no time for ", s.describe(seen[f] ? i.id : f));
    double bytes = stage_bytes[a.stage];
    deltas[i.worker].insert({start[f], bytes});
    deltas[i.worker].insert({end[i.id], -bytes});
    if (!transient.forward_extra.empty()) {
      deltas[i.worker].insert({start[f], transient.forward_extra[a.stage]});
      deltas[i.worker].insert({end[f], -transient.forward_extra[a.stage]});
    }
    if (!transient.backward_extra.empty()) {
      deltas[i.worker].insert({start[i.id], transient.backward_extra[a.stage]});
      deltas[i.worker].insert({end[i.id], -transient.backward_extra[a.stage]});
    }
  }
  ActivationProfile p;
  for (auto& d : deltas) p.per_worker.push_back(from_deltas(d));
  p.total = sum_curves(p.per_worker);
  return p;
}

namespace {
// A worker's Activations bytes as a step function of wall-clock time.
Curve wall_curve(const std::vector<MemorySample>& samples, int64_t base) {
  Curve c;
  c.push(-1e300, static_cast<double>(base));
  for (const MemorySample& m : samples)
    if (m.category == MemoryCategory::Activations) {
      if (m.time_s <= c.t.back()) {
        c.v.back() = static_cast<double>(m.category_bytes);
      } else {
        c.push(m.time_s, static_cast<double>(m.category_bytes));
      }
    }
  return c;
}
}  // namespace

ActivationProfile aligned_activations(const Timeline& timeline, const std::vector<InstrTime>& simulated,
                                      const std::vector<std::vector<InstrTime>>& executed,
                                      const std::vector<std::vector<MemorySample>>& samples,
                                      const std::vector<int64_t>& base_bytes) {
  const Schedule& s = timeline.schedule;
  const size_t W = static_cast<size_t>(s.workers());
  TD_CHECK(executed.size() == W && samples.size() == W && base_bytes.size() == W,
           "aligned_activations: needs executed times, samples and base bytes for each of the ", W, " workers");
  std::vector<InstrTime> sim(s.size());
  for (const InstrTime& t : simulated) sim.at(static_cast<size_t>(t.id)) = t;
  ActivationProfile p;
  for (size_t w = 0; w < W; ++w) {
    Curve wall = wall_curve(samples[w], base_bytes[w]);
    std::map<int, InstrTime> run;
    for (const InstrTime& t : executed[w]) run[t.id] = t;
    Curve c;
    c.push(-1e300, static_cast<double>(base_bytes[w]));
    for (int id : s.program(static_cast<int>(w), kComputeLane)) {
      auto it = run.find(id);
      TD_CHECK(it != run.end(), "aligned_activations: worker ", w, " has no executed time for ", s.describe(id));
      double peak = wall.at(it->second.start_s);
      for (size_t i = 0; i < wall.t.size(); ++i)
        if (wall.t[i] > it->second.start_s && wall.t[i] <= it->second.end_s) peak = std::max(peak, wall.v[i]);
      const InstrTime& st = sim[static_cast<size_t>(id)];
      c.push(std::max(st.start_s, c.t.back()), peak);
      if (st.end_s > c.t.back()) c.push(st.end_s, wall.at(it->second.end_s));
    }
    p.per_worker.push_back(std::move(c));
  }
  p.total = sum_curves(p.per_worker);
  return p;
}

ActivationProfile wall_clock_activations(const std::vector<std::vector<MemorySample>>& samples,
                                         const std::vector<int64_t>& base_bytes) {
  TD_CHECK(samples.size() == base_bytes.size(), "wall_clock_activations: one base per worker");
  ActivationProfile p;
  for (size_t w = 0; w < samples.size(); ++w) p.per_worker.push_back(wall_curve(samples[w], base_bytes[w]));
  p.total = sum_curves(p.per_worker);
  return p;
}

std::vector<double> comm_bytes_per_bin(const std::vector<std::vector<CommRecord>>& records, double origin, double bin_s,
                                       int bins) {
  TD_CHECK(bin_s > 0 && bins > 0, "comm_bytes_per_bin: needs a positive bin width and count");
  std::vector<double> out(static_cast<size_t>(bins), 0.0);
  for (const auto& worker : records)
    for (const CommRecord& r : worker) {
      double b = (r.time_s - origin) / bin_s;
      if (b < 0 || b >= bins) continue;
      out[static_cast<size_t>(b)] += static_cast<double>(r.bytes);
    }
  return out;
}

std::vector<double> scheduled_bytes_per_bin(const Timeline& timeline, const std::vector<InstrTime>& times, double bin_s,
                                            int bins) {
  TD_CHECK(bin_s > 0 && bins > 0, "scheduled_bytes_per_bin: needs a positive bin width and count");
  std::vector<double> out(static_cast<size_t>(bins), 0.0);
  for (const InstrTime& t : times) {
    const Instr& i = timeline.schedule.at(t.id);
    if (i.kind != OpKind::Send && i.kind != OpKind::AllReduce) continue;
    double b = t.start_s / bin_s;
    if (b < 0 || b >= bins) continue;
    out[static_cast<size_t>(b)] += static_cast<double>(i.bytes);
  }
  return out;
}

MessageBytes message_bytes(const Timeline& timeline) {
  MessageBytes m;
  for (const Instr& i : timeline.schedule.instrs()) {
    if (i.kind != OpKind::Send && i.kind != OpKind::AllReduce) continue;
    const double b = static_cast<double>(i.bytes);
    switch (timeline.actions.at(static_cast<size_t>(i.id)).kind) {
      case ActionKind::SendAct: m.activations += b; break;
      case ActionKind::SendGrad: m.activation_gradients += b; break;
      case ActionKind::IssueParams:
      case ActionKind::RelayParams: m.parameters += b; break;
      default: m.gradients += b; break;
    }
  }
  return m;
}

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
