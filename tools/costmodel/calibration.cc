// Calibration data, recorded points, and the fit of the free constants.
#include "tools/costmodel/calibration.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <nlohmann/json.hpp>

#include "runtime/base/error.h"

namespace tandem {
namespace costmodel {

namespace {

std::string kernel_label(const std::string& name, int64_t n) { return "kernel " + name + " n " + std::to_string(n); }
std::string commit_label(const std::string& commit, const std::string& label) {
  return commit.empty() ? label : commit + ": " + label;
}

// The free constants as a vector of logarithms, clamped to plausible ranges when read back.
struct Free {
  double Constants::*field;
  double lo, hi, start;
};
const Free kFree[] = {
    {&Constants::kernel_memory, 0.2, 1.2, 0.9},
    {&Constants::collective_cycles, 0, 2000, 10},
    {&Constants::barrier_cycles, 0, 2000, 10},
    {&Constants::wavefront_cycles, 0, 2000, 2},
    {&Constants::launch_floor_s, 0.5e-6, 20e-6, 3e-6},
    {&Constants::conv_fwd, 0.02, 1, 0.5},
    {&Constants::conv_bwd, 0.02, 1, 0.5},
    {&Constants::conv_grouped_fwd, 0.0005, 1, 0.05},
    {&Constants::conv_grouped_bwd, 0.0005, 1, 0.05},
};
constexpr int kFreeCount = sizeof(kFree) / sizeof(kFree[0]);

Constants constants_of(const std::vector<double>& x) {
  Constants c;
  for (int i = 0; i < kFreeCount; ++i) c.*kFree[i].field = std::min(kFree[i].hi, std::max(kFree[i].lo, std::exp(x[i])));
  c.library_memory = c.kernel_memory;
  return c;
}

size_t fitted_count(const std::vector<Point>& points) {
  size_t n = 0;
  for (const Point& p : points) n += p.m.kind != PointKind::PipeBd;
  return n;
}

double objective(const std::vector<Point>& points, const std::vector<double>& x) {
  const Constants c = constants_of(x);
  double sum = 0;
  for (const Point& p : points) {
    if (p.m.kind == PointKind::PipeBd) continue;  // they fit the host alone (fit_host)
    const double e = std::log(predicted_s(p, c) / p.measured_s());
    sum += e * e;
  }
  return sum / static_cast<double>(fitted_count(points));
}

// Nelder-Mead (reflection 1, expansion 2, contraction 1/2, shrink 1/2) from x0 with steps `step`.
std::vector<double> nelder_mead(const std::function<double(const std::vector<double>&)>& f, std::vector<double> x0,
                                double step, int iterations) {
  const size_t n = x0.size();
  std::vector<std::vector<double>> s(n + 1, x0);
  for (size_t i = 0; i < n; ++i) s[i + 1][i] += step;
  std::vector<double> v(n + 1);
  for (size_t i = 0; i <= n; ++i) v[i] = f(s[i]);
  for (int it = 0; it < iterations; ++it) {
    std::vector<size_t> order(n + 1);
    for (size_t i = 0; i <= n; ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](size_t a, size_t b) { return v[a] < v[b]; });
    std::vector<std::vector<double>> s2;
    std::vector<double> v2;
    for (size_t i : order) {
      s2.push_back(s[i]);
      v2.push_back(v[i]);
    }
    s = s2;
    v = v2;
    if (v[n] - v[0] <= 1e-14 * (std::abs(v[0]) + 1e-300)) break;
    std::vector<double> centroid(n, 0.0);
    for (size_t i = 0; i < n; ++i)
      for (size_t k = 0; k < n; ++k) centroid[k] += s[i][k] / static_cast<double>(n);
    auto along = [&](double t) {
      std::vector<double> p(n);
      for (size_t k = 0; k < n; ++k) p[k] = centroid[k] + t * (s[n][k] - centroid[k]);
      return p;
    };
    const std::vector<double> r = along(-1);
    const double vr = f(r);
    if (vr < v[0]) {
      const std::vector<double> e = along(-2);
      const double ve = f(e);
      s[n] = ve < vr ? e : r;
      v[n] = std::min(ve, vr);
    } else if (vr < v[n - 1]) {
      s[n] = r;
      v[n] = vr;
    } else {
      const std::vector<double> c = along(vr < v[n] ? -0.5 : 0.5);
      const double vc = f(c);
      if (vc < std::min(vr, v[n])) {
        s[n] = c;
        v[n] = vc;
      } else {
        for (size_t i = 1; i <= n; ++i) {
          for (size_t k = 0; k < n; ++k) s[i][k] = s[0][k] + 0.5 * (s[i][k] - s[0][k]);
          v[i] = f(s[i]);
        }
      }
    }
  }
  return s[static_cast<size_t>(std::min_element(v.begin(), v.end()) - v.begin())];
}

// Whether j holds no object (a record's values: numbers, strings, arrays of them).
bool flat(const Json& j) {
  if (j.is_object()) return false;
  if (j.is_array())
    for (const Json& e : j)
      if (!flat(e)) return false;
  return true;
}

void append_records(const Json& j, int depth, std::string* out) {
  const bool record = j.is_object() && std::all_of(j.begin(), j.end(), [](const Json& e) { return flat(e); });
  if (record || flat(j)) {
    *out += dump_json(j);
    return;
  }
  const std::string indent(static_cast<size_t>(depth + 1), ' ');
  *out += j.is_object() ? "{" : "[";
  bool first = true;
  for (auto it = j.begin(); it != j.end(); ++it) {
    *out += (first ? "\n" : ",\n") + indent;
    first = false;
    if (j.is_object()) *out += dump_json(it.key()) + ": ";
    append_records(it.value(), depth + 1, out);
  }
  *out += "\n" + std::string(static_cast<size_t>(depth), ' ') + (j.is_object() ? "}" : "]");
}

// The host's time per op, fitted to the Pipe-BD points with the GPU constants as fitted (calibration.h): the
// best of a log-spaced scan from 0.1 us to 1 ms, refined by halving the scan's step around it (the squared log
// error is flat where the GPU bounds every strategy, so a descent alone could stop anywhere there).
void fit_host(const std::vector<Point>& points, FitResult* r) {
  std::vector<const Point*> runs;
  for (const Point& p : points)
    if (p.m.kind == PointKind::PipeBd) runs.push_back(&p);
  if (runs.empty()) return;
  auto error = [&](double log_h) {
    Constants c = r->constants;
    c.host_op_s = std::exp(log_h);
    double sum = 0;
    for (const Point* p : runs) {
      const double e = std::log(predicted_s(*p, c) / p->measured_s());
      sum += e * e;
    }
    return sum / static_cast<double>(runs.size());
  };
  const double lo = std::log(1e-7), hi = std::log(1e-3);
  double step = (hi - lo) / 200, best = lo, best_error = error(lo);
  auto consider = [&](double x) {
    const double e = error(x);
    if (e < best_error) {
      best = x;
      best_error = e;
    }
  };
  for (double x = lo + step; x <= hi; x += step) consider(x);
  for (int i = 0; i < 30; ++i) {
    step /= 2;
    const double around = best;
    consider(around - step);
    consider(around + step);
  }
  r->constants.host_op_s = std::exp(best);
  r->host_rms_log_error = std::sqrt(best_error);
}

}  // namespace

std::string records_text(const Json& j) {
  std::string out;
  append_records(j, 0, &out);
  return out;
}

std::vector<Measurement> parse_calibration(const Json& j, const std::vector<KernelCase>& cases) {
  std::vector<Measurement> out;
  for (const Json& run : json_array(json_at(j, "runs"), "calibration runs")) {
    const std::string gpu = json_string(json_at(run, "gpu"), "run gpu");
    gpu_spec(gpu);  // a known GPU
    const std::string commit = json_string(json_at(run, "commit"), "run commit");
    const double copy = json_number(json_at(run, "copy_bytes_per_s"), "run copy_bytes_per_s");
    TD_CHECK(copy > 0, "run on ", gpu, ": copy_bytes_per_s must be positive");
    auto measurement = [&](PointKind kind) {
      Measurement m;
      m.kind = kind;
      m.gpu = gpu;
      m.commit = commit;
      return m;
    };
    if (run.contains("kernels")) {
      const Json& k = json_at(run, "kernels");
      const int64_t n = json_int(json_at(k, "n"), "kernels n");
      const Json& pct = json_object(json_at(k, "pct_of_copy"), "kernels pct_of_copy");
      for (auto it = pct.begin(); it != pct.end(); ++it) {
        Measurement m = measurement(PointKind::Kernel);
        m.kernel = it.key();
        m.n = n;
        m.pct_of_copy = json_number(it.value(), "pct_of_copy of " + it.key());
        m.copy_bytes_per_s = copy;
        m.label = commit_label(commit, kernel_label(m.kernel, n));
        TD_CHECK(m.pct_of_copy > 0, m.label, ": pct_of_copy must be positive");
        bool known = false;
        for (const KernelCase& c : cases) known |= c.name == m.kernel;
        TD_CHECK(known, "calibration kernel '", m.kernel, "' is not a kernels_bench case");
        out.push_back(m);
      }
    }
    if (run.contains("pipe_bd")) {
      for (const Json& e : json_array(json_at(run, "pipe_bd"), "run pipe_bd")) {
        Measurement m = measurement(PointKind::PipeBd);
        m.workload = json_string(json_at(e, "workload"), "pipe_bd workload");
        TD_CHECK(m.workload == "nas" || m.workload == "compression", "pipe_bd workload '", m.workload,
                 "' is not nas or compression");
        m.input = json_int(json_at(e, "input"), "pipe_bd input");
        m.batch = json_int(json_at(e, "batch"), "pipe_bd batch");
        m.steps = json_int(json_at(e, "steps"), "pipe_bd steps");
        m.workers = static_cast<int>(json_int(json_at(e, "workers"), "pipe_bd workers"));
        TD_CHECK(m.input > 0 && m.batch > 0 && m.steps > 0 && m.workers > 0,
                 "pipe_bd input, batch, steps and workers must be positive");
        m.sm_partitions = json_at(e, "sm_partitions").get<bool>();
        const Json& secs = json_object(json_at(e, "seconds_per_epoch"), "pipe_bd seconds_per_epoch");
        for (auto it = secs.begin(); it != secs.end(); ++it) {
          Measurement s = m;
          s.strategy = it.key();
          s.seconds = json_number(it.value(), "seconds_per_epoch of " + it.key());
          TD_CHECK(s.seconds > 0, "pipe_bd seconds_per_epoch of ", it.key(), " must be positive");
          s.label = s.run_label() + ": " + s.strategy;
          out.push_back(s);
        }
      }
    }
    if (run.contains("models")) {
      for (const Json& e : json_array(json_at(run, "models"), "run models")) {
        Measurement m = measurement(PointKind::ModelStep);
        m.step.model = json_string(json_at(e, "model"), "model");
        m.step.mode = json_string(json_at(e, "mode"), "model mode");
        m.step.size = json_int(json_at(e, "size"), "model size");
        m.step.batch = json_int(json_at(e, "batch"), "model batch");
        m.images_per_s = json_number(json_at(e, "images_per_s"), "images_per_s");
        TD_CHECK(m.images_per_s > 0 && m.step.batch > 0 && m.step.size > 0, m.step.label(),
                 ": batch, size and images_per_s must be positive");
        m.label = commit_label(commit, m.step.label());
        out.push_back(m);
      }
    }
  }
  return out;
}

std::string Measurement::run_label() const {
  return commit_label(commit, "pipe-bd ") + workload + "/" + std::to_string(input) + " batch " + std::to_string(batch) +
         " steps " + std::to_string(steps) + " on " + std::to_string(workers) +
         (sm_partitions ? " SM partitions" : " GPUs");
}

double Point::measured_s() const {
  if (m.kind == PointKind::Kernel) return bytes / (m.pct_of_copy / 100 * m.copy_bytes_per_s);
  if (m.kind == PointKind::PipeBd) return m.seconds;
  return static_cast<double>(m.step.batch) / m.images_per_s;
}

Json points_to_json(const std::vector<Point>& points) {
  Json out = Json::object();
  for (const Point& p : points) {
    if (p.model) {
      out[p.m.kind == PointKind::PipeBd ? p.m.run_label() : p.m.label] = p.model->to_json();
      continue;
    }
    Json e = Json::object();
    e["bytes"] = p.bytes;
    Json ops = Json::array();
    for (const OpCounts& op : p.ops) ops.push_back(op_to_json(op));
    e["ops"] = ops;
    out[p.m.label] = e;
  }
  return out;
}

std::vector<Point> join_counters(const std::vector<Measurement>& ms, const Json& counters,
                                 const PointModelReader& read_model) {
  std::vector<Point> out;
  for (const Measurement& m : ms) {
    const std::string key = m.kind == PointKind::PipeBd ? m.run_label() : m.label;
    TD_CHECK(counters.contains(key), "no recorded ops for '", key,
             "' in the calibration counters: rerun bazel run --config=cudasim //tools/costmodel:fit");
    const Json& e = json_at(counters, key);
    Point p;
    p.m = m;
    if (m.kind == PointKind::PipeBd) {
      TD_CHECK(read_model != nullptr, m.label, ": Pipe-BD points need tools/costmodel/bd to read them");
      p.model = read_model(m, e);
      out.push_back(p);
      continue;
    }
    p.bytes = json_number(json_at(e, "bytes"), m.label + " bytes");
    for (const Json& op : json_array(json_at(e, "ops"), m.label + " ops")) p.ops.push_back(op_from_json(op));
    out.push_back(p);
  }
  return out;
}

double predicted_s(const Point& p, const Constants& c) {
  const GpuSpec& gpu = gpu_spec(p.m.gpu);
  if (p.model) return p.model->predict_s(gpu, c);
  // A kernels_bench case times its launches alone; a model step is launched by one host thread.
  return p.m.kind == PointKind::ModelStep ? host_bound_seconds(p.ops, gpu, c) : gpu_seconds(p.ops, gpu, c);
}

FitResult fit(const std::vector<Point>& points) {
  TD_CHECK(fitted_count(points) > 0, "nothing to fit: no kernel or model-step calibration points");
  auto f = [&](const std::vector<double>& x) { return objective(points, x); };
  std::vector<double> x(kFreeCount);
  for (int i = 0; i < kFreeCount; ++i) x[static_cast<size_t>(i)] = std::log(kFree[i].start);
  // Restarts from the best point found, with smaller steps, escape the simplex's early collapses.
  for (double step : {1.0, 0.5, 0.25, 0.1}) x = nelder_mead(f, x, step, 4000);
  FitResult r;
  r.constants = constants_of(x);
  r.rms_log_error = std::sqrt(f(x));
  fit_host(points, &r);
  return r;
}

std::string constants_source(const FitResult& r, const std::vector<Point>& points) {
  auto num = [](double v) {
    char b[64];
    std::snprintf(b, sizeof(b), "%.17g", v);
    return std::string(b);
  };
  std::string s = "// The cost model's constants fitted to calibration.json (" + std::to_string(fitted_count(points)) +
                  " points, rms log error " + num(r.rms_log_error).substr(0, 6) +
                  ";\n// host_op_s: " + std::to_string(points.size() - fitted_count(points)) +
                  " Pipe-BD points, rms log error " + num(r.host_rms_log_error).substr(0, 6) +
                  ").\n// Written by tools/costmodel:fit (calibration.h says how); do not edit: rerun\n"
                  "//   bazel run --config=cudasim //tools/costmodel:fit\n"
                  "#include \"tools/costmodel/model.h\"\n\nnamespace tandem {\nnamespace costmodel {\n\n"
                  "const Constants& fitted_constants() {\n  static const Constants c = [] {\n    Constants k;\n";
  for (const auto& [name, v] : named_constants(r.constants)) s += "    k." + std::string(name) + " = " + num(v) + ";\n";
  s += "    return k;\n  }();\n  return c;\n}\n\n}  // namespace costmodel\n}  // namespace tandem";  // write_text ends
                                                                                                      // the line
  return s;
}

std::vector<std::string> changed_points(const std::vector<Point>& stored, const std::vector<Point>& fresh,
                                        const Constants& c, double tolerance) {
  TD_CHECK(stored.size() == fresh.size(), "comparing ", stored.size(), " stored points with ", fresh.size(), " fresh");
  std::vector<std::string> out;
  for (size_t i = 0; i < stored.size(); ++i) {
    const double a = predicted_s(stored[i], c), b = predicted_s(fresh[i], c);
    if (std::abs(b - a) > tolerance * a) {
      char text[256];
      std::snprintf(text, sizeof(text), "%s: %.1f us from the stored counters, %.1f us from fresh ones",
                    stored[i].m.label.c_str(), a * 1e6, b * 1e6);
      out.push_back(text);
    }
  }
  return out;
}

std::vector<Point> record_baseline(const std::vector<KernelCase>& cases) {
  std::vector<Point> out;
  for (const KernelCase& c : cases) {
    Point p;
    p.m.kind = PointKind::Kernel;
    p.m.gpu = "h200";
    p.m.kernel = c.name;
    p.m.n = c.args.back();
    p.m.label = "kernel " + c.name + " " + c.arg_name + " " + std::to_string(p.m.n);
    p.ops = record_kernel_case(c, p.m.n, c.record_arg, &p.bytes, Extrapolation::Proportional);
    out.push_back(p);
  }
  Point probe = probe_point(record_model_step(probe_step(), kProbeRecordBatch, Extrapolation::Proportional));
  probe.m.gpu = "h200";
  out.push_back(probe);
  return out;
}

Json baseline_to_json(const std::vector<Point>& points) { return points_to_json(points); }

std::vector<Point> baseline_from_json(const Json& j) {
  std::vector<Point> out;
  for (auto it = json_object(j, "baseline").begin(); it != j.end(); ++it) {
    Point p;
    p.m.label = it.key();
    p.m.gpu = "h200";
    p.bytes = json_number(json_at(it.value(), "bytes"), it.key() + " bytes");
    for (const Json& op : json_array(json_at(it.value(), "ops"), it.key() + " ops")) p.ops.push_back(op_from_json(op));
    out.push_back(p);
  }
  return out;
}

StepSpec probe_step() {
  StepSpec s;
  s.model = "resnet18";
  s.mode = "fwd_bwd";
  s.size = 32;
  s.batch = 256;
  return s;
}

Point probe_point(std::vector<OpCounts> ops) {
  Point p;
  p.m.step = probe_step();
  p.m.label = p.m.step.label();
  p.ops = std::move(ops);
  return p;
}

}  // namespace costmodel
}  // namespace tandem
