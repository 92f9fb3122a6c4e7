// A profile as tables: per op (the innermost scope its kernels ran in) and per kernel, each row with its count,
// total milliseconds, share of the profiled step and bytes per second where its kernels declared their operands.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "runtime/tensor/profiler.h"

namespace tandem {
namespace profiler {

struct Row {
  std::string name;
  int64_t count = 0;    // ops: scopes opened under this name; kernels: launches
  int64_t kernels = 0;  // the kernels timed in it
  double ms = 0;        // their total time
  double share = 0;     // ms / the profile's step time
  uint64_t bytes = 0;   // the bytes their operands span (0: none declared)
};

// Rows by total time, longest first (ties by name). An op's time is its own kernels' (not its nested scopes');
// kernels outside every scope form the row kNoOp.
std::vector<Row> op_rows(const Profile& p);
std::vector<Row> kernel_rows(const Profile& p);

// Both tables as text under a line giving the profiled time, the kernels' total and share of it, and the timer;
// `max_rows` > 0 keeps the longest rows of each table.
std::string format_table(const Profile& p, size_t max_rows = 0);

}  // namespace profiler
}  // namespace tandem
