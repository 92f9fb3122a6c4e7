// Event-driven list scheduling of a Schedule over its workers' lanes.
#include "parallel/simulator.h"

#include <algorithm>
#include <map>

#include "runtime/base/error.h"

namespace tandem {
namespace parallel {

SimResult simulate(const Schedule& s, SendModel sends) {
  size_t n = s.size();
  std::vector<std::vector<int>> lanes(static_cast<size_t>(s.workers()) * kNumLanes);
  for (const Instr& i : s.instrs()) lanes[i.worker * kNumLanes + i.lane].push_back(i.id);
  std::vector<size_t> next(lanes.size(), 0);
  std::vector<double> lane_free(lanes.size(), 0.0);
  std::vector<double> start(n, 0), end(n, 0);
  std::vector<bool> finished(n, false);
  auto match = s.matching_sends();
  std::vector<int> recv_of(n, -1);  // a Send's matching Recv
  for (size_t id = 0; id < n; ++id)
    if (match[id] >= 0) recv_of[match[id]] = static_cast<int>(id);
  std::map<int, std::vector<int>> collectives;
  for (const Instr& i : s.instrs())
    if ((i.kind == OpKind::AllReduce || i.kind == OpKind::Barrier) && i.collective >= 0)
      collectives[i.collective].push_back(i.id);

  // Earliest start of instruction id, or -1 if a predecessor has not finished.
  auto ready_time = [&](int id) -> double {
    const Instr& i = s.at(id);
    double t = lane_free[i.worker * kNumLanes + i.lane];
    for (int d : i.deps) {
      if (!finished[d]) return -1;
      t = std::max(t, end[d]);
    }
    return t;
  };
  auto is_head = [&](int id) {
    const Instr& i = s.at(id);
    size_t l = i.worker * kNumLanes + i.lane;
    return next[l] < lanes[l].size() && lanes[l][next[l]] == id;
  };
  auto finish = [&](int id, double st, double en) {
    const Instr& i = s.at(id);
    size_t l = i.worker * kNumLanes + i.lane;
    start[id] = st;
    end[id] = en;
    finished[id] = true;
    lane_free[l] = en;
    ++next[l];
  };

  size_t done = 0;
  while (done < n) {
    bool progressed = false;
    for (size_t l = 0; l < lanes.size(); ++l) {
      if (next[l] >= lanes[l].size()) continue;
      int id = lanes[l][next[l]];
      const Instr& i = s.at(id);
      double t = ready_time(id);
      if (t < 0) continue;
      if (i.kind == OpKind::Recv && match[id] >= 0) {
        if (!finished[match[id]]) continue;
        finish(id, t, std::max(t + i.cost_s, end[match[id]]));
      } else if (sends == SendModel::Rendezvous && i.kind == OpKind::Send && recv_of[id] >= 0) {
        // The pair moves together once the Recv heads its lane and waits for nothing but this Send.
        const int rv = recv_of[id];
        if (!is_head(rv)) continue;
        const Instr& ri = s.at(rv);
        double tr = lane_free[ri.worker * kNumLanes + ri.lane];
        bool others_done = true;
        for (int d : ri.deps) {
          if (d == id) continue;
          others_done = others_done && finished[d];
          if (finished[d]) tr = std::max(tr, end[d]);
        }
        if (!others_done) continue;
        const double st = std::max(t, tr);
        finish(id, st, st + i.cost_s);
        finish(rv, st, st + std::max(i.cost_s, ri.cost_s));
        ++done;
      } else if ((i.kind == OpKind::AllReduce || i.kind == OpKind::Barrier) && i.collective >= 0) {
        auto& members = collectives[i.collective];
        double st = t, cost = 0;
        bool all_ready = true;
        for (int m : members) {
          double tm = is_head(m) ? ready_time(m) : -1;
          if (tm < 0) {
            all_ready = false;
            break;
          }
          st = std::max(st, tm);
          cost = std::max(cost, s.at(m).cost_s);
        }
        if (!all_ready) continue;
        for (int m : members) finish(m, st, st + cost);
        done += members.size() - 1;
      } else {
        finish(id, t, t + i.cost_s);
      }
      ++done;
      progressed = true;
    }
    if (!progressed) {
      for (size_t l = 0; l < lanes.size(); ++l)
        if (next[l] < lanes[l].size())
          TD_THROW(ValueError, "simulation stuck: ", s.describe(lanes[l][next[l]]),
                   " can never start (the schedule deadlocks)");
    }
  }

  SimResult r;
  r.busy_s.assign(s.workers(), 0.0);
  for (const Instr& i : s.instrs()) {
    r.times.push_back({i.id, start[i.id], end[i.id]});
    r.makespan_s = std::max(r.makespan_s, end[i.id]);
    if (i.lane == kComputeLane && i.kind != OpKind::Recv && i.kind != OpKind::Barrier)
      r.busy_s[i.worker] += end[i.id] - start[i.id];
  }
  return r;
}

}  // namespace parallel
}  // namespace tandem
