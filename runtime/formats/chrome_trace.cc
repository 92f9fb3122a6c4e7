// Trace events: one process for the host's op scopes (a track per thread), one for the kernels (a track per
// stream), with metadata events naming both processes.
#include "runtime/formats/chrome_trace.h"

#include <nlohmann/json.hpp>

#include "runtime/base/files.h"

namespace tandem {

namespace {

constexpr int kOpsPid = 1, kKernelsPid = 2;

Json complete_event(const std::string& name, const char* category, int pid, uint64_t tid, int64_t start_ns,
                    int64_t end_ns, int64_t origin_ns) {
  return Json{{"name", name},
              {"cat", category},
              {"ph", "X"},
              {"pid", pid},
              {"tid", tid},
              {"ts", static_cast<double>(start_ns - origin_ns) * 1e-3},
              {"dur", static_cast<double>(end_ns - start_ns) * 1e-3}};
}

Json process_name(int pid, const std::string& name) {
  return Json{{"name", "process_name"}, {"ph", "M"}, {"pid", pid}, {"tid", 0}, {"args", {{"name", name}}}};
}

}  // namespace

Json chrome_trace(const profiler::Profile& p) {
  Json events = Json::array();
  events.push_back(process_name(kOpsPid, "ops (host threads)"));
  events.push_back(process_name(kKernelsPid, "kernels (" + p.timer + ", by stream)"));
  for (const profiler::ScopeRecord& s : p.scopes) {
    Json e = complete_event(s.name, "op", kOpsPid, static_cast<uint64_t>(s.thread), s.start_ns, s.end_ns, p.start_ns);
    e["args"] = {{"depth", s.depth}};
    events.push_back(std::move(e));
  }
  for (const profiler::KernelRecord& k : p.kernels) {
    Json e = complete_event(k.name, "kernel", kKernelsPid, k.stream, k.start_ns, k.end_ns, p.start_ns);
    e["args"] = {{"op", k.op}, {"bytes", k.bytes}};
    events.push_back(std::move(e));
  }
  return Json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
}

void write_chrome_trace(const profiler::Profile& p, const std::string& path) {
  write_text(path, dump_json(chrome_trace(p)));
}

}  // namespace tandem
