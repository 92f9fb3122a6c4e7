// Chrome trace-event JSON writer.
#include "parallel/trace.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <sstream>

#include "runtime/base/error.h"

namespace tandem {
namespace parallel {

namespace {
std::string escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      out += buf;
      continue;
    }
    out += c;
  }
  return out;
}
const char* lane_name(int lane) { return lane == kComputeLane ? "compute" : "comm"; }
}  // namespace

std::string trace_json(const Schedule& schedule, const std::vector<InstrTime>& times,
                       const std::vector<std::string>& worker_names) {
  double t0 = std::numeric_limits<double>::infinity();
  for (const InstrTime& t : times) t0 = std::min(t0, t.start_s);
  if (times.empty()) t0 = 0;
  std::vector<const InstrTime*> by_id(schedule.size(), nullptr);
  for (const InstrTime& t : times)
    if (t.id >= 0 && static_cast<size_t>(t.id) < schedule.size()) by_id[t.id] = &t;

  std::ostringstream os;
  os.setf(std::ios::fixed);
  os.precision(3);
  os << "{\"displayTimeUnit\":\"ms\",\"traceEvents\":[\n";
  bool first = true;
  auto sep = [&] {
    if (!first) os << ",\n";
    first = false;
  };
  for (int w = 0; w < schedule.workers(); ++w) {
    std::string name = w < static_cast<int>(worker_names.size()) ? worker_names[w] : "worker " + std::to_string(w);
    sep();
    os << "{\"ph\":\"M\",\"name\":\"process_name\",\"pid\":" << w << ",\"args\":{\"name\":\"" << escape(name) << "\"}}";
    for (int l = 0; l < kNumLanes; ++l) {
      sep();
      os << "{\"ph\":\"M\",\"name\":\"thread_name\",\"pid\":" << w << ",\"tid\":" << l << ",\"args\":{\"name\":\""
         << lane_name(l) << "\"}}";
    }
  }
  for (const InstrTime& t : times) {
    const Instr& i = schedule.at(t.id);
    sep();
    os << "{\"ph\":\"X\",\"name\":\"" << escape(i.label) << "\",\"cat\":\"" << op_kind_name(i.kind)
       << "\",\"pid\":" << i.worker << ",\"tid\":" << i.lane << ",\"ts\":" << (t.start_s - t0) * 1e6
       << ",\"dur\":" << std::max(0.0, t.end_s - t.start_s) * 1e6 << ",\"args\":{\"id\":" << i.id
       << ",\"step\":" << i.step << ",\"block\":" << i.block << ",\"stage\":" << i.stage << ",\"micro\":" << i.micro
       << ",\"bytes\":" << i.bytes << "}}";
  }
  auto match = schedule.matching_sends();
  for (size_t r = 0; r < match.size(); ++r) {
    if (match[r] < 0 || !by_id[r] || !by_id[match[r]]) continue;
    const Instr& s = schedule.at(match[r]);
    const Instr& rv = schedule.at(static_cast<int>(r));
    sep();
    os << "{\"ph\":\"s\",\"name\":\"relay\",\"cat\":\"flow\",\"id\":" << r << ",\"pid\":" << s.worker
       << ",\"tid\":" << s.lane << ",\"ts\":" << (by_id[match[r]]->start_s - t0) * 1e6 << "}";
    sep();
    os << "{\"ph\":\"f\",\"bp\":\"e\",\"name\":\"relay\",\"cat\":\"flow\",\"id\":" << r << ",\"pid\":" << rv.worker
       << ",\"tid\":" << rv.lane << ",\"ts\":" << (by_id[r]->end_s - t0) * 1e6 << "}";
  }
  os << "\n]}\n";
  return os.str();
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
