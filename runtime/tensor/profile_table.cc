// Summing a profile's kernels per op and per kernel name, and printing the two tables.
#include "runtime/tensor/profile_table.h"

#include <algorithm>
#include <cstdio>
#include <map>

namespace tandem {
namespace profiler {

namespace {

std::vector<Row> sorted(const std::map<std::string, Row>& by_name, double step_ms) {
  std::vector<Row> rows;
  for (const auto& [name, row] : by_name) {
    rows.push_back(row);
    rows.back().name = name;
    rows.back().share = step_ms > 0 ? row.ms / step_ms : 0;
  }
  std::stable_sort(rows.begin(), rows.end(), [](const Row& a, const Row& b) { return a.ms > b.ms; });
  return rows;
}

void add_kernel(Row& row, const KernelRecord& k) {
  ++row.kernels;
  row.ms += static_cast<double>(k.end_ns - k.start_ns) * 1e-6;
  row.bytes += k.bytes;
}

std::string format_rows(const char* what, const std::vector<Row>& rows, size_t max_rows) {
  char line[512];
  std::snprintf(line, sizeof line, "%-40s %8s %8s %10s %7s %9s\n", what, "count", "kernels", "total ms", "share",
                "GB/s");
  std::string out = line;
  for (size_t i = 0; i < rows.size() && (max_rows == 0 || i < max_rows); ++i) {
    const Row& r = rows[i];
    char rate[32] = "-";
    if (r.bytes > 0 && r.ms > 0) std::snprintf(rate, sizeof rate, "%.1f", static_cast<double>(r.bytes) / r.ms * 1e-6);
    std::string name = r.name.size() > 40 ? r.name.substr(0, 37) + "..." : r.name;
    std::snprintf(line, sizeof line, "%-40s %8lld %8lld %10.3f %6.1f%% %9s\n", name.c_str(),
                  static_cast<long long>(r.count), static_cast<long long>(r.kernels), r.ms, 100 * r.share, rate);
    out += line;
  }
  if (max_rows > 0 && rows.size() > max_rows) out += "(" + std::to_string(rows.size() - max_rows) + " more)\n";
  return out;
}

}  // namespace

std::vector<Row> op_rows(const Profile& p) {
  std::map<std::string, Row> ops;
  for (const ScopeRecord& s : p.scopes) ++ops[s.name].count;
  for (const KernelRecord& k : p.kernels) add_kernel(ops[k.op], k);
  return sorted(ops, p.ms());
}

std::vector<Row> kernel_rows(const Profile& p) {
  std::map<std::string, Row> kernels;
  for (const KernelRecord& k : p.kernels) {
    Row& row = kernels[k.name];
    ++row.count;
    add_kernel(row, k);
  }
  return sorted(kernels, p.ms());
}

std::string format_table(const Profile& p, size_t max_rows) {
  double kernel_ms = 0;
  for (const KernelRecord& k : p.kernels) kernel_ms += static_cast<double>(k.end_ns - k.start_ns) * 1e-6;
  char head[256];
  std::snprintf(head, sizeof head, "profile: %.3f ms; %zu kernels timed by %s, %.3f ms (%.1f%%)\n", p.ms(),
                p.kernels.size(), p.timer.c_str(), kernel_ms, p.ms() > 0 ? 100 * kernel_ms / p.ms() : 0.0);
  return head + format_rows("op", op_rows(p), max_rows) + "\n" + format_rows("kernel", kernel_rows(p), max_rows);
}

}  // namespace profiler
}  // namespace tandem
