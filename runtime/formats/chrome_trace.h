// A profile (runtime/tensor/profiler.h) as a Chrome trace: the JSON trace-event format that chrome://tracing and
// Perfetto load. Ops are complete events ("ph": "X") on their host thread's track, kernels on their stream's.
#pragma once

#include <string>

#include "runtime/formats/json.h"
#include "runtime/tensor/profiler.h"

namespace tandem {

// {"traceEvents": [...], "displayTimeUnit": "ms"}; times in microseconds from the profile's start.
Json chrome_trace(const profiler::Profile& p);

// Writes chrome_trace(p) to `path`. Throws IoError when it cannot be written.
void write_chrome_trace(const profiler::Profile& p, const std::string& path);

}  // namespace tandem
