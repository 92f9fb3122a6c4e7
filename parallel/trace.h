// Chrome/Perfetto trace of executed or simulated schedules: one process per worker, one thread per lane.
#pragma once

#include <string>
#include <vector>

#include "parallel/executor.h"
#include "parallel/schedule.h"

namespace tandem {
namespace parallel {

// JSON in the Chrome trace-event format (load in chrome://tracing or ui.perfetto.dev). Times are shifted so
// the earliest instruction starts at 0; sends and their receives are joined by flow arrows.
std::string trace_json(const Schedule& schedule, const std::vector<InstrTime>& times,
                       const std::vector<std::string>& worker_names);
// Writes trace_json to `path` atomically (temporary file, then rename); throws IoError.
void write_trace(const std::string& path, const Schedule& schedule, const std::vector<InstrTime>& times,
                 const std::vector<std::string>& worker_names);

}  // namespace parallel
}  // namespace tandem
