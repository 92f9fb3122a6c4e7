// Names, parsing and staleness of the cyclic-DP rules and modes.
#include "parallel/cyclic/rules.h"

#include "runtime/base/error.h"

namespace tandem {
namespace parallel {
namespace cyclic {

const char* rule_name(Rule r) {
  switch (r) {
    case Rule::Dp: return "dp";
    case Rule::CdpV1: return "cdp-v1";
    case Rule::CdpV2: return "cdp-v2";
  }
  return "?";
}

const char* mode_name(Mode m) {
  switch (m) {
    case Mode::DpWorkers: return "dp-workers";
    case Mode::ModelParallel: return "mp";
    case Mode::Zero: return "zero";
  }
  return "?";
}

const char* sync_name(GradSync g) { return g == GradSync::AllReduce ? "all-reduce" : "chain"; }

GradSync parse_sync(const std::string& s) {
  for (GradSync g : {GradSync::AllReduce, GradSync::Chain})
    if (s == sync_name(g)) return g;
  TD_THROW(ValueError, "unknown gradient sync '", s, "' (choose all-reduce or chain)");
}

Rule parse_rule(const std::string& s) {
  for (Rule r : {Rule::Dp, Rule::CdpV1, Rule::CdpV2})
    if (s == rule_name(r)) return r;
  TD_THROW(ValueError, "unknown update rule '", s, "' (choose dp, cdp-v1 or cdp-v2)");
}

Mode parse_mode(const std::string& s) {
  for (Mode m : {Mode::DpWorkers, Mode::ModelParallel, Mode::Zero})
    if (s == mode_name(m)) return m;
  TD_THROW(ValueError, "unknown mode '", s, "' (choose dp-workers, mp or zero)");
}

bool delayed(Rule rule, int micro, int stage, int stages) {
  switch (rule) {
    case Rule::Dp: return false;
    case Rule::CdpV1: return true;
    case Rule::CdpV2: return v2_stale(micro, stage, stages);
  }
  return false;
}

int workers_needed(Mode mode, int micro_batches, int stages) {
  return mode == Mode::ModelParallel ? stages : micro_batches;
}

void check_config(int micro_batches, int stages) {
  TD_CHECK(micro_batches >= 1 && micro_batches <= kMaxMicroBatches, "the number of micro-batches N must be in 1..",
           kMaxMicroBatches, ", got ", micro_batches);
  TD_CHECK(stages >= 1 && stages <= kMaxStages, "the number of stages S must be in 1..", kMaxStages, ", got ", stages);
}

}  // namespace cyclic
}  // namespace parallel
}  // namespace tandem
