// Merged, sorted predictions and their table and JSON.
#include "tools/costmodel/report.h"

#include <algorithm>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "tools/costmodel/scaling.h"

namespace tandem {
namespace costmodel {

std::vector<OpPrediction> predict_ops(const std::vector<OpCounts>& ops, const GpuSpec& gpu, const Constants& c) {
  std::vector<OpPrediction> rows;
  for (const OpCounts& op : merge_by_key(ops)) {
    const OpTime t = predict(op, gpu, c);
    OpPrediction r;
    r.kind = op.kind == OpKind::Kernel ? "kernel" : op.kind == OpKind::Library ? "library" : "copy";
    r.name = op.name;
    r.where = op.kind == OpKind::Kernel ? op.detail : op.op_class + (op.precision.empty() ? "" : " " + op.precision);
    r.launches = op.launches;
    r.seconds = t.seconds;
    r.dram_bytes = t.dram_bytes;
    r.flops = op.flops;
    r.bound = t.bound;
    rows.push_back(r);
  }
  std::stable_sort(rows.begin(), rows.end(),
                   [](const OpPrediction& a, const OpPrediction& b) { return a.seconds > b.seconds; });
  return rows;
}

double total_seconds(const std::vector<OpPrediction>& rows) {
  double s = 0;
  for (const OpPrediction& r : rows) s += r.seconds;
  return s;
}

std::string prediction_table(const std::vector<OpPrediction>& rows, size_t max_rows) {
  std::string out;
  char line[512];
  std::snprintf(line, sizeof(line), "%10s %6s %8s %10s %10s  %-10s %s\n", "pred_ms", "share", "launches", "dram_MB",
                "GFLOP", "bound", "op (where)");
  out += line;
  const double total = total_seconds(rows);
  double rest = 0;
  size_t rest_rows = 0;
  for (size_t i = 0; i < rows.size(); ++i) {
    const OpPrediction& r = rows[i];
    if (max_rows > 0 && i >= max_rows) {
      rest += r.seconds;
      ++rest_rows;
      continue;
    }
    std::snprintf(line, sizeof(line), "%10.3f %5.1f%% %8.1f %10.1f %10.2f  %-10s %s (%s)\n", r.seconds * 1e3,
                  total > 0 ? 100 * r.seconds / total : 0.0, r.launches, r.dram_bytes * 1e-6, r.flops * 1e-9,
                  r.bound.c_str(), r.name.c_str(), r.where.c_str());
    out += line;
  }
  if (rest_rows > 0) {
    std::snprintf(line, sizeof(line), "%10.3f %5.1f%% %8s %10s %10s  %-10s %zu more ops\n", rest * 1e3,
                  total > 0 ? 100 * rest / total : 0.0, "", "", "", "", rest_rows);
    out += line;
  }
  return out;
}

Json predictions_json(const std::vector<OpPrediction>& rows) {
  Json out = Json::array();
  for (const OpPrediction& r : rows) {
    Json e = Json::object();
    e["kind"] = r.kind;
    e["name"] = r.name;
    e["where"] = r.where;
    e["launches"] = r.launches;
    e["predicted_s"] = r.seconds;
    e["dram_bytes"] = r.dram_bytes;
    e["flops"] = r.flops;
    e["bound"] = r.bound;
    out.push_back(e);
  }
  return out;
}

}  // namespace costmodel
}  // namespace tandem
