// Joining a profile's op rows to predictions by op name, the predictions' JSON, and the joined table.
#include "tools/costmodel/profile_compare.h"

#include <algorithm>
#include <cstdio>
#include <map>
#include <nlohmann/json.hpp>

namespace tandem {
namespace costmodel {

std::vector<OpScopePrediction> predict_by_op(const OpsByOp& ops, const GpuSpec& gpu, const Constants& c) {
  std::vector<OpScopePrediction> rows;
  for (const auto& [op, list] : ops) {
    OpScopePrediction r;
    r.op = op;
    for (const OpCounts& o : list) {
      if (o.kind == OpKind::Copy) continue;
      r.launches += o.launches;
      r.seconds += predict(o, gpu, c).seconds;
    }
    if (r.launches > 0) rows.push_back(r);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const OpScopePrediction& a, const OpScopePrediction& b) { return a.seconds > b.seconds; });
  return rows;
}

Json op_scope_predictions_json(const std::vector<OpScopePrediction>& rows) {
  Json out = Json::array();
  for (const OpScopePrediction& r : rows) {
    Json e = Json::object();
    e["op"] = r.op;
    e["launches"] = r.launches;
    e["predicted_s"] = r.seconds;
    out.push_back(e);
  }
  return out;
}

std::vector<OpScopePrediction> op_scope_predictions_from_json(const Json& j) {
  std::vector<OpScopePrediction> rows;
  for (const Json& e : json_array(j, "the predictions by op")) {
    json_object(e, "a prediction by op");
    OpScopePrediction r;
    r.op = json_string(json_at(e, "op"), "prediction op");
    r.launches = json_number(json_at(e, "launches"), "prediction launches");
    r.seconds = json_number(json_at(e, "predicted_s"), "prediction predicted_s");
    rows.push_back(r);
  }
  return rows;
}

std::vector<ComparedRow> join_by_op(const std::vector<profiler::Row>& measured,
                                    const std::vector<OpScopePrediction>& predicted) {
  std::map<std::string, const OpScopePrediction*> by_name;
  for (const OpScopePrediction& p : predicted) by_name.emplace(p.op, &p);
  std::vector<ComparedRow> rows;
  for (const profiler::Row& m : measured) {
    ComparedRow r;
    r.name = m.name;
    r.measured = true;
    r.row = m;
    auto it = by_name.find(m.name);
    if (it != by_name.end()) {
      r.predicted = true;
      r.launches = it->second->launches;
      r.predicted_ms = it->second->seconds * 1e3;
      by_name.erase(it);
    }
    rows.push_back(r);
  }
  for (const OpScopePrediction& p : predicted) {
    if (!by_name.count(p.op)) continue;  // matched above
    ComparedRow r;
    r.name = p.op;
    r.predicted = true;
    r.launches = p.launches;
    r.predicted_ms = p.seconds * 1e3;
    rows.push_back(r);
  }
  return rows;
}

namespace {

// "a, b, c" of the rows on one side only (`measured`: measured only), at most 8 names then how many more.
std::string one_side_names(const std::vector<ComparedRow>& rows, bool measured, size_t* n) {
  std::string names;
  *n = 0;
  for (const ComparedRow& r : rows) {
    if (r.measured != measured || r.predicted == measured) continue;
    if (++*n <= 8) names += (names.empty() ? "" : ", ") + r.name;
  }
  if (*n > 8) names += " and " + std::to_string(*n - 8) + " more";
  return names;
}

std::string footnote(const std::vector<ComparedRow>& rows, size_t without_kernels) {
  size_t measured_only = 0, predicted_only = 0;
  const std::string m = one_side_names(rows, true, &measured_only);
  const std::string p = one_side_names(rows, false, &predicted_only);
  std::string out = measured_only == 0 && predicted_only == 0 ? "every op shown is both measured and predicted;"
                                                              : "-: the op is on one side only:";
  if (measured_only > 0) out += " measured only (" + std::to_string(measured_only) + "): " + m + ";";
  if (predicted_only > 0) out += " predicted only (" + std::to_string(predicted_only) + "): " + p + ";";
  if (without_kernels > 0) out += " " + std::to_string(without_kernels) + " measured ops without kernels not shown;";
  out.back() = '\n';
  return out;
}

// Ops the profile saw run no kernel (autograd's bookkeeping, views) and the model did not predict: nothing to
// compare.
bool kernel_less(const ComparedRow& r) { return r.measured && !r.predicted && r.row.kernels == 0; }

}  // namespace

std::string compared_table(const std::vector<ComparedRow>& all, const std::string& predicted_on, size_t max_rows) {
  std::vector<ComparedRow> rows;
  for (const ComparedRow& r : all)
    if (!kernel_less(r)) rows.push_back(r);
  char line[512];
  std::snprintf(line, sizeof line, "%-40s %8s %8s %12s %12s %10s\n", ("op, predicted on " + predicted_on).c_str(),
                "count", "kernels", "measured ms", "predicted ms", "meas/pred");
  std::string out = line;
  double measured_ms = 0, predicted_ms = 0;
  size_t both = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const ComparedRow& r = rows[i];
    if (r.measured && r.predicted) {
      measured_ms += r.row.ms;
      predicted_ms += r.predicted_ms;
      ++both;
    }
    if (max_rows > 0 && i >= max_rows) continue;
    char count[24] = "-", kernels[24] = "-", meas[24] = "-", pred[24] = "-", ratio[24] = "-";
    if (r.measured) {
      std::snprintf(count, sizeof count, "%lld", static_cast<long long>(r.row.count));
      std::snprintf(kernels, sizeof kernels, "%lld", static_cast<long long>(r.row.kernels));
      std::snprintf(meas, sizeof meas, "%.3f", r.row.ms);
    }
    if (r.predicted) std::snprintf(pred, sizeof pred, "%.3f", r.predicted_ms);
    if (r.measured && r.predicted && r.predicted_ms > 0)
      std::snprintf(ratio, sizeof ratio, "%.2f", r.row.ms / r.predicted_ms);
    const std::string name = r.name.size() > 40 ? r.name.substr(0, 37) + "..." : r.name;
    std::snprintf(line, sizeof line, "%-40s %8s %8s %12s %12s %10s\n", name.c_str(), count, kernels, meas, pred, ratio);
    out += line;
  }
  if (max_rows > 0 && rows.size() > max_rows) out += "(" + std::to_string(rows.size() - max_rows) + " more)\n";
  std::snprintf(line, sizeof line, "%-40s %8s %8s %12.3f %12.3f %10.2f\n",
                ("ops on both sides (" + std::to_string(both) + ")").c_str(), "", "", measured_ms, predicted_ms,
                predicted_ms > 0 ? measured_ms / predicted_ms : 0.0);
  return out + line + footnote(rows, all.size() - rows.size());
}

}  // namespace costmodel
}  // namespace tandem
