// The kernels and library calls a piece of code ran, by name, from the simulated GPU's record: for a test that a
// pass runs on the kernels it should (Tandem's own against cuDNN's, a launch folded into another).
#pragma once

#include <functional>
#include <string>
#include <vector>

namespace tandem {
namespace testing {

// Whether the record is kept here (the simulated GPU; not a real GPU's run).
bool kernel_record_available();
// The names of what fn launched, in order; empty where no record is kept.
std::vector<std::string> kernels_run(const std::function<void()>& fn);
// How many of `names` contain `part`.
int count_containing(const std::vector<std::string>& names, const std::string& part);

}  // namespace testing
}  // namespace tandem
