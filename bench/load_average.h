// load_average(): how busy the machine is while a benchmark runs (other processes share its cores).
#pragma once

namespace tandem {

// The 1-minute load average from /proc/loadavg; -1 where it cannot be read.
double load_average();

}  // namespace tandem
