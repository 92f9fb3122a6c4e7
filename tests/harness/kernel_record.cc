// The simulated GPU's record of launches, by name (tools/costmodel/counters.h).
#include "tests/harness/kernel_record.h"

#include "tools/costmodel/counters.h"

namespace tandem {
namespace testing {

bool kernel_record_available() { return costmodel::counters_available(); }

std::vector<std::string> kernels_run(const std::function<void()>& fn) {
  if (!kernel_record_available()) {
    fn();
    return {};
  }
  costmodel::Recording rec;
  fn();
  std::vector<std::string> names;
  for (const costmodel::OpCounts& op : rec.take()) names.push_back(op.name);
  return names;
}

int count_containing(const std::vector<std::string>& names, const std::string& part) {
  int n = 0;
  for (const std::string& name : names) n += name.find(part) != std::string::npos ? 1 : 0;
  return n;
}

}  // namespace testing
}  // namespace tandem
