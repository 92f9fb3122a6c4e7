// Merging ops by key and extrapolating them to another size.
#include "tools/costmodel/scaling.h"

#include <map>

#include "runtime/base/error.h"

namespace tandem {
namespace costmodel {

std::vector<OpCounts> merge_by_key(const std::vector<OpCounts>& ops) {
  std::vector<OpCounts> out;
  std::map<std::string, size_t> index;
  for (const OpCounts& op : ops) {
    auto [it, fresh] = index.emplace(op.key(), out.size());
    if (fresh)
      out.push_back(op);
    else
      out[it->second].add(op);
  }
  return out;
}

std::vector<OpCounts> extrapolate(const std::vector<OpCounts>& at_a, double a, const std::vector<OpCounts>& at_b,
                                  double b, double target) {
  TD_CHECK(b > a, "extrapolation needs two different sizes, got ", a, " and ", b);
  const std::vector<OpCounts> ma = merge_by_key(at_a), mb = merge_by_key(at_b);
  std::map<std::string, const OpCounts*> in_b;
  for (const OpCounts& op : mb) in_b[op.key()] = &op;
  const double f = (target - a) / (b - a);
  std::vector<OpCounts> out;
  std::map<std::string, bool> seen;
  for (const OpCounts& op : ma) {
    auto it = in_b.find(op.key());
    const OpCounts zero = op.scaled(0);
    out.push_back(OpCounts::extrapolate(op, it != in_b.end() ? *it->second : zero, f));
    seen[op.key()] = true;
  }
  for (const OpCounts& op : mb)
    if (!seen.count(op.key())) out.push_back(OpCounts::extrapolate(op.scaled(0), op, f));
  return out;
}

OpCounts total(const std::vector<OpCounts>& ops) {
  OpCounts t;
  t.launches = 0;
  for (const OpCounts& op : ops) t.add(op);
  return t;
}

}  // namespace costmodel
}  // namespace tandem
