// The op case families, in the order of their tests (ops_test, nn_ops_test).
#include "tests/opbench/case_families.h"

#include "tests/nn/nn_cases.h"
#include "tests/runtime/op_cases.h"

namespace tandem {
namespace testing {

const std::vector<CaseFamily>& case_families() {
  static const std::vector<CaseFamily> families = {
      {"elementwise", elementwise_cases, false},  // comparisons, where and in-place ops count bytes
      {"reduction", reduction_cases, false},
      {"linalg", linalg_cases, true},
      {"join_index", join_index_cases, false},
      {"view_copy", view_copy_cases, false},
      {"conv", conv_cases, true},
      {"pool", pool_cases, true},
      {"batch_norm", batch_norm_cases, true},
      {"dropout_format", dropout_format_cases, false},
  };
  return families;
}

}  // namespace testing
}  // namespace tandem
