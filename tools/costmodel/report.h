// Predictions as people read them: recorded ops merged per kernel and launch site (or per library call kind),
// each with its launches, device-memory bytes, FLOPs and predicted time on a modelled GPU, as a table or JSON.
// The kernel profiler's op table is put beside predictions per profiler op instead (profile_compare.h).
#pragma once

#include <string>
#include <vector>

#include "runtime/formats/json.h"
#include "tools/costmodel/model.h"

namespace tandem {
namespace costmodel {

struct OpPrediction {
  std::string kind;   // kernel, library, copy
  std::string name;   // kernel as launched, or API function
  std::string where;  // kernel: file:line of the launch; library and copies: the kind of call and precision
  double launches = 0, seconds = 0, dram_bytes = 0, flops = 0;
  std::string bound;  // what sets the time (model.h)
};

// The ops merged per key, longest predicted time first.
std::vector<OpPrediction> predict_ops(const std::vector<OpCounts>& ops, const GpuSpec& gpu, const Constants& c);
double total_seconds(const std::vector<OpPrediction>& rows);

// A text table of the first `max_rows` rows (0: all) and a line summing the rest.
std::string prediction_table(const std::vector<OpPrediction>& rows, size_t max_rows);
Json predictions_json(const std::vector<OpPrediction>& rows);

}  // namespace costmodel
}  // namespace tandem
