// Every family of op cases (tests/runtime/op_cases.h, tests/nn/nn_cases.h) in one list: what op_bench times
// and op_bench_test checks, so that a new family, and each new case of one, is benchmarked.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "tests/harness/op_harness.h"

namespace tandem {
namespace testing {

struct CaseFamily {
  std::string name;
  std::function<std::vector<OpCase>()> cases;
  bool needs_flops;  // whether each case must count its FLOPs (arithmetic families; copies and views count bytes)
};

const std::vector<CaseFamily>& case_families();

}  // namespace testing
}  // namespace tandem
