// Chrome trace-event JSON writer: the events built as one Json value and written by runtime/formats/json.h.
#include "parallel/trace.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <limits>

#include "runtime/base/error.h"
#include "runtime/formats/json.h"

namespace tandem {
namespace parallel {

namespace {
const char* lane_name(int lane) { return lane == kComputeLane ? "compute" : "comm"; }

// Trace time: microseconds, to the nanosecond.
double micros(double seconds) { return std::round(seconds * 1e9) / 1e3; }
}  // namespace

std::string trace_json(const Schedule& schedule, const std::vector<InstrTime>& times,
                       const std::vector<std::string>& worker_names) {
  double t0 = std::numeric_limits<double>::infinity();
  for (const InstrTime& t : times) t0 = std::min(t0, t.start_s);
  if (times.empty()) t0 = 0;
  std::vector<const InstrTime*> by_id(schedule.size(), nullptr);
  for (const InstrTime& t : times)
    if (t.id >= 0 && static_cast<size_t>(t.id) < schedule.size()) by_id[t.id] = &t;

  Json events = Json::array();
  for (int w = 0; w < schedule.workers(); ++w) {
    std::string name = w < static_cast<int>(worker_names.size()) ? worker_names[w] : "worker " + std::to_string(w);
    events.push_back({{"ph", "M"}, {"name", "process_name"}, {"pid", w}, {"args", {{"name", name}}}});
    for (int l = 0; l < kNumLanes; ++l)
      events.push_back(
          {{"ph", "M"}, {"name", "thread_name"}, {"pid", w}, {"tid", l}, {"args", {{"name", lane_name(l)}}}});
  }
  for (const InstrTime& t : times) {
    const Instr& i = schedule.at(t.id);
    events.push_back({{"ph", "X"},
                      {"name", i.label},
                      {"cat", op_kind_name(i.kind)},
                      {"pid", i.worker},
                      {"tid", i.lane},
                      {"ts", micros(t.start_s - t0)},
                      {"dur", micros(std::max(0.0, t.end_s - t.start_s))},
                      {"args",
                       {{"id", i.id},
                        {"step", i.step},
                        {"block", i.block},
                        {"stage", i.stage},
                        {"micro", i.micro},
                        {"bytes", i.bytes}}}});
  }
  auto match = schedule.matching_sends();
  for (size_t r = 0; r < match.size(); ++r) {
    if (match[r] < 0 || !by_id[r] || !by_id[match[r]]) continue;
    const Instr& s = schedule.at(match[r]);
    const Instr& rv = schedule.at(static_cast<int>(r));
    events.push_back({{"ph", "s"},
                      {"name", "relay"},
                      {"cat", "flow"},
                      {"id", r},
                      {"pid", s.worker},
                      {"tid", s.lane},
                      {"ts", micros(by_id[match[r]]->start_s - t0)}});
    events.push_back({{"ph", "f"},
                      {"bp", "e"},
                      {"name", "relay"},
                      {"cat", "flow"},
                      {"id", r},
                      {"pid", rv.worker},
                      {"tid", rv.lane},
                      {"ts", micros(by_id[r]->end_s - t0)}});
  }
  return dump_json(Json{{"displayTimeUnit", "ms"}, {"traceEvents", events}}) + "\n";
}

void write_trace(const std::string& path, const Schedule& schedule, const std::vector<InstrTime>& times,
                 const std::vector<std::string>& worker_names) {
  std::string tmp = path + ".tmp";
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    TD_CHECK_IO(f.good(), "cannot write trace file '", tmp, "'");
    f << trace_json(schedule, times, worker_names);
    TD_CHECK_IO(f.good(), "writing trace file '", tmp, "' failed");
  }
  TD_CHECK_IO(std::rename(tmp.c_str(), path.c_str()) == 0, "cannot rename '", tmp, "' to '", path, "'");
}

}  // namespace parallel
}  // namespace tandem
