// Units and stage splits.
#include "parallel/cyclic/partition.h"

#include <algorithm>
#include <limits>
#include <sstream>

#include "runtime/base/error.h"
#include "runtime/base/spec_reader.h"

namespace tandem {
namespace parallel {
namespace cyclic {

std::vector<Unit> model_units(const models::Sequential& model, const Shape& sample) {
  TD_CHECK(!model.empty(), "model_units: the model has no items");
  std::vector<Unit> units;
  Shape s = sample;
  for (size_t i = 0; i < model.size(); ++i) {
    const models::ModulePtr& item = model.at(i);
    const models::NamedModules& children = item->named_children();
    std::vector<std::pair<std::string, models::ModulePtr>> parts;
    if (item->splits_into_units() && children.size() > 1) {
      for (const auto& child : children) parts.push_back({model.name_at(i) + "." + child.first, child.second});
    } else {
      parts.push_back({model.name_at(i), item});
    }
    for (auto& p : parts) {
      Unit u;
      u.name = p.first;
      u.module = p.second;
      u.input = s;
      try {
        u.output = u.module->output_shape(s);
      } catch (const ShapeError& e) {
        TD_THROW(ShapeError, "unit '", u.name, "' does not accept ", shape_str(s), ": ", e.message());
      }
      u.flops = u.module->flops(s);
      s = u.output;
      units.push_back(std::move(u));
    }
  }
  return units;
}

std::vector<size_t> balanced_split(const std::vector<Unit>& units, int stages) {
  const size_t U = units.size();
  TD_CHECK(stages >= 1, "the number of stages must be at least 1, got ", stages);
  TD_CHECK(static_cast<size_t>(stages) <= U, "cannot cut the model into ", stages, " stages: it has only ", U,
           " units (layers a stage boundary may fall between)");
  std::vector<double> prefix(U + 1, 0);
  for (size_t i = 0; i < U; ++i) prefix[i + 1] = prefix[i] + units[i].flops;
  const double inf = std::numeric_limits<double>::infinity();
  // best[s][i]: the smallest possible largest stage over the first i units cut into s stages.
  std::vector<std::vector<double>> best(stages + 1, std::vector<double>(U + 1, inf));
  std::vector<std::vector<size_t>> cut(stages + 1, std::vector<size_t>(U + 1, 0));
  best[0][0] = 0;
  for (int st = 1; st <= stages; ++st)
    for (size_t i = st; i <= U; ++i)
      for (size_t j = st - 1; j < i; ++j) {
        double v = std::max(best[st - 1][j], prefix[i] - prefix[j]);
        if (v < best[st][i]) {
          best[st][i] = v;
          cut[st][i] = j;
        }
      }
  std::vector<size_t> starts(stages);
  size_t i = U;
  for (int st = stages; st >= 1; --st) {
    starts[st - 1] = cut[st][i];
    i = cut[st][i];
  }
  return starts;
}

std::vector<size_t> parse_split(const std::string& spec, const std::vector<Unit>& units) {
  TD_CHECK(!units.empty(), "split '", spec, "': the model has no units");
  const SpecReader r("split", spec);
  std::vector<size_t> starts;
  for (const std::string& item : r.items(spec, ',')) {
    int64_t index = -1;
    if (item.find_first_not_of("-0123456789") == std::string::npos) {  // a number, else a name
      index = r.integer("unit index", item, 0, static_cast<int64_t>(units.size()) - 1);
    } else {
      for (size_t i = 0; i < units.size(); ++i)
        if (units[i].name == item) index = static_cast<int64_t>(i);
      if (index < 0) {
        std::string names;
        for (const Unit& u : units) names += (names.empty() ? "" : ", ") + u.name;
        r.fail("no unit named '", item, "' (units: ", names, ")");
      }
    }
    starts.push_back(static_cast<size_t>(index));
  }
  if (starts.empty() || starts[0] != 0) r.fail("the split must start at the first unit (", units[0].name, " or 0)");
  for (size_t i = 1; i < starts.size(); ++i)
    if (starts[i] <= starts[i - 1]) r.fail("stage starts must increase");
  return starts;
}

std::vector<std::shared_ptr<models::Sequential>> make_stages(const std::vector<Unit>& units,
                                                             const std::vector<size_t>& starts) {
  TD_CHECK(!starts.empty() && starts[0] == 0, "make_stages: the first stage must start at unit 0");
  std::vector<std::shared_ptr<models::Sequential>> stages;
  for (size_t s = 0; s < starts.size(); ++s) {
    size_t end = s + 1 < starts.size() ? starts[s + 1] : units.size();
    TD_CHECK(end > starts[s] && end <= units.size(), "make_stages: bad stage start ", starts[s]);
    auto stage = std::make_shared<models::Sequential>();
    for (size_t i = starts[s]; i < end; ++i) stage->add(units[i].name, units[i].module);
    stage->set_label("stage " + std::to_string(s) + " (" + units[starts[s]].name +
                     (end - starts[s] > 1 ? " .. " + units[end - 1].name : "") + ")");
    stages.push_back(stage);
  }
  return stages;
}

std::string describe_split(const std::vector<Unit>& units, const std::vector<size_t>& starts) {
  std::ostringstream os;
  double total = 0;
  for (const Unit& u : units) total += u.flops;
  for (size_t s = 0; s < starts.size(); ++s) {
    size_t end = s + 1 < starts.size() ? starts[s + 1] : units.size();
    double f = 0;
    for (size_t i = starts[s]; i < end; ++i) f += units[i].flops;
    if (s) os << " | ";
    os << units[starts[s]].name;
    if (end - starts[s] > 1) os << " .. " << units[end - 1].name;
    os << " (" << static_cast<int>(total > 0 ? 100.0 * f / total + 0.5 : 0) << "% FLOPs)";
  }
  return os.str();
}

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
