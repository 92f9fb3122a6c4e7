// Profile extrapolation and simulated speedups over DP.
#include "parallel/bd/projection.h"

#include <algorithm>

#include "parallel/bd/bd_schedule.h"
#include "parallel/simulator.h"
#include "runtime/base/error.h"

namespace tandem {
namespace parallel {
namespace bd {

namespace {

struct Line {
  double a = 0, c = 0;
  double at(double x) const { return a + c * x; }
};

// Least squares y = a + c x with a, c >= 0.
Line fit(const std::vector<double>& x, const std::vector<double>& y) {
  Line l;
  if (x.empty()) return l;
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  const double n = static_cast<double>(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    sx += x[i];
    sy += y[i];
    sxx += x[i] * x[i];
    sxy += x[i] * y[i];
  }
  const double det = n * sxx - sx * sx;
  if (x.size() >= 2 && det > 0) {
    l.c = (n * sxy - sx * sy) / det;
    l.a = (sy - l.c * sx) / n;
  }
  if (x.size() < 2 || det <= 0 || l.a < 0) {  // through the origin
    l.a = 0;
    l.c = sxx > 0 ? std::max(0.0, sxy / sxx) : 0;
  } else if (l.c < 0) {  // flat
    l.c = 0;
    l.a = sy / n;
  }
  return l;
}

}  // namespace

BlockProfile extend_profile(const BlockProfile& p, int max_g) {
  TD_CHECK(p.batch > 0, "extending a profile needs the batch it was measured at (profile.batch)");
  const int measured = p.max_replicas(), k = p.blocks();
  BlockProfile out = p;
  if (max_g <= measured) return out;
  auto rows = [&](int g) { return static_cast<double>(p.batch) / g; };
  std::vector<double> x;
  for (int g = 1; g <= measured; ++g) x.push_back(rows(g));
  auto column = [&](const std::vector<std::vector<double>>& m, int b) {
    std::vector<double> y;
    for (int g = 0; g < measured; ++g) y.push_back(m[g][b]);
    return y;
  };
  std::vector<Line> teacher, student, memory, allreduce;
  for (int b = 0; b < k; ++b) {
    teacher.push_back(fit(x, column(p.teacher_s, b)));
    student.push_back(fit(x, column(p.student_s, b)));
    std::vector<double> mem;
    for (int g = 0; g < measured; ++g) mem.push_back(static_cast<double>(p.memory[g][b]));
    memory.push_back(fit(x, mem));
    std::vector<double> gx, gy;
    for (int g = 2; g <= measured; ++g) {
      gx.push_back(static_cast<double>(g - 1) / g);
      gy.push_back(p.allreduce_s[g - 1][b]);
    }
    allreduce.push_back(fit(gx, gy));
  }
  Line load = fit(x, p.load_s.empty() ? std::vector<double>(x.size(), 0.0) : p.load_s);
  for (int g = measured + 1; g <= max_g; ++g) {
    std::vector<double> te, st, ar;
    std::vector<int64_t> mem;
    for (int b = 0; b < k; ++b) {
      te.push_back(teacher[b].at(rows(g)));
      st.push_back(student[b].at(rows(g)));
      ar.push_back(allreduce[b].at(static_cast<double>(g - 1) / g));
      mem.push_back(static_cast<int64_t>(memory[b].at(rows(g))));
    }
    out.teacher_s.push_back(te);
    out.student_s.push_back(st);
    out.allreduce_s.push_back(ar);
    out.memory.push_back(mem);
    if (!p.load_s.empty()) out.load_s.push_back(load.at(rows(g)));
    // The launches do not change with the rows.
    if (!p.teacher_host_s.empty()) {
      out.teacher_host_s.push_back(p.teacher_host_s.back());
      out.student_host_s.push_back(p.student_host_s.back());
    }
  }
  return out;
}

std::vector<Projection> project(const BlockProfile& profile, const std::vector<int>& worker_counts, int64_t steps,
                                const std::vector<int64_t>& row_bytes, int64_t memory_limit, PlanModel model) {
  TD_CHECK(steps >= 1, "projections need at least one step");
  TD_CHECK(memory_limit == 0 || model == PlanModel::Tandem,
           "a memory limit needs the tandem plan model: the pipe-bd model (the paper's planner) has none");
  int max_w = 1;
  for (int w : worker_counts) max_w = std::max(max_w, w);
  const BlockProfile p = extend_profile(profile, max_w);
  const int k = p.blocks();
  std::vector<Projection> out;
  for (int w : worker_counts) {
    TD_CHECK(w >= 1, "worker counts must be positive, got ", w);
    std::vector<std::pair<Layout, int64_t>> layouts;  // with the plan's memory estimate
    if (p.batch % w == 0) layouts.push_back({dp_layout(k, w), 0});
    layouts.push_back({ls_layout(p, w), 0});
    const int stages = std::min(w, k);
    for (Strategy s : {Strategy::TR, Strategy::DPU, Strategy::AHD}) {
      try {
        Plan plan =
            s == Strategy::AHD ? plan_hybrid(p, w, memory_limit, model) : plan_pipeline(p, stages, memory_limit, model);
        layouts.push_back({pipeline_layout(s, plan, k, plan.workers()), plan.peak_memory});
      } catch (const ValueError&) {
        // no plan fits the memory limit: the strategy is left out at this scale
      }
    }
    double dp_time = 0;
    for (auto& [layout, memory] : layouts) {
      DistillSchedule d = build_schedule(layout, p.batch, steps, steps, row_bytes);
      apply_costs(d, p);
      Projection r;
      r.workers = w;
      r.used = layout.workers;
      r.strategy = layout.strategy;
      r.layout = layout.describe();
      // Launches are asynchronous: the host runs ahead of the GPU unless its launches take longer than the
      // GPU's work, and then the GPU waits for them.
      r.makespan_s = std::max(simulate(d.schedule).makespan_s, host_work_s(d, p));
      r.peak_memory = memory;
      if (layout.strategy == Strategy::DP) dp_time = r.makespan_s;
      out.push_back(r);
    }
    for (Projection& r : out)
      if (r.workers == w && dp_time > 0 && r.makespan_s > 0) r.speedup = dp_time / r.makespan_s;
  }
  return out;
}

}  // namespace bd
}  // namespace parallel
}  // namespace tandem
