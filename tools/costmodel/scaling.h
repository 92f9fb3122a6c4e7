// Ops of runs at small sizes made into the ops of a larger run: merged by what they are (OpCounts::key) and
// extrapolated number by number along the line through two sizes, which is exact for counts that grow
// linearly with the size (bytes and FLOPs of batched layers, elementwise traffic) and keeps those that do not
// grow (weights' traffic); launches are the larger run's.
#pragma once

#include <vector>

#include "tools/costmodel/counters.h"

namespace tandem {
namespace costmodel {

// The ops summed per key, in the order each key first appears.
std::vector<OpCounts> merge_by_key(const std::vector<OpCounts>& ops);

// The ops at size `target` from runs of one program at sizes a < b (a key missing from one run counts zero
// there). Counts are not extrapolated below zero.
std::vector<OpCounts> extrapolate(const std::vector<OpCounts>& at_a, double a, const std::vector<OpCounts>& at_b,
                                  double b, double target);

// The sum of every op (for totals).
OpCounts total(const std::vector<OpCounts>& ops);

}  // namespace costmodel
}  // namespace tandem
