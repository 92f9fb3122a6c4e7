// Predicted beside measured: the kernel profiler's op rows (runtime/tensor/profile_table.h) joined by op name
// to the cost model's predicted time of the same ops (recorded by op on the simulated GPU, op_record.h), with
// the ratio measured / predicted. The profiler knows nothing of the model: the join lives here.
#pragma once

#include <string>
#include <vector>

#include "runtime/formats/json.h"
#include "runtime/tensor/profile_table.h"
#include "tools/costmodel/model.h"
#include "tools/costmodel/op_record.h"

namespace tandem {
namespace costmodel {

// One op's predicted GPU time: its kernels and library calls (copies are left out: CUPTI, a real GPU's timer,
// times kernels only).
struct OpScopePrediction {
  std::string op;
  double launches = 0, seconds = 0;
};

// Each op's prediction on `gpu`, longest first.
std::vector<OpScopePrediction> predict_by_op(const OpsByOp& ops, const GpuSpec& gpu, const Constants& c);
// As JSON ([{"op", "launches", "predicted_s"}]) and back (ValueError naming a missing or mistyped field).
Json op_scope_predictions_json(const std::vector<OpScopePrediction>& rows);
std::vector<OpScopePrediction> op_scope_predictions_from_json(const Json& j);

// An op of either side: its measured row and its prediction where each exists.
struct ComparedRow {
  std::string name;
  bool measured = false, predicted = false;
  profiler::Row row;  // measured
  double launches = 0, predicted_ms = 0;
};

// The rows of both sides matched by name: the measured ones longest first, then those predicted only, longest
// first.
std::vector<ComparedRow> join_by_op(const std::vector<profiler::Row>& measured,
                                    const std::vector<OpScopePrediction>& predicted);

// The joined rows as a table (the first `max_rows`, 0: all) with measured and predicted ms and their ratio
// where both exist ("-" where one side lacks the op), a line of totals over the ops both sides have, and a
// footnote naming the ops of one side only. Measured ops that ran no kernel and have no prediction are left
// out (the footnote counts them). `predicted_on` names the modelled GPU.
std::string compared_table(const std::vector<ComparedRow>& rows, const std::string& predicted_on, size_t max_rows = 0);

}  // namespace costmodel
}  // namespace tandem
