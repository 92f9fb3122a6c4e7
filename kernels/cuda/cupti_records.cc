// Reading CUPTI's kernel and external-correlation records (the layouts of the toolkit's cupti_activity.h, which
// the libcupti loaded at run time must match: the bundle carries the toolkit's own).
#include "kernels/cuda/cupti_records.h"

#include <cxxabi.h>

#include <cstdlib>

namespace tandem {
namespace cuda {

using KernelRecord = CUpti_ActivityKernel10;

void CuptiRecords::add(const CUpti_Activity& record) {
  if (record.kind == CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL || record.kind == CUPTI_ACTIVITY_KIND_KERNEL) {
    const auto& k = reinterpret_cast<const KernelRecord&>(record);
    kernels.push_back({kernel_display_name(k.name), k.correlationId, k.start, k.end, k.streamId});
  } else if (record.kind == CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION) {
    const auto& c = reinterpret_cast<const CUpti_ActivityExternalCorrelation&>(record);
    if (c.externalKind == kProfilerCorrelation) call_of[c.correlationId] = c.externalId;
  }
}

std::vector<profiler::DeviceKernel> CuptiRecords::device_kernels(int64_t offset_ns) const {
  std::vector<profiler::DeviceKernel> out;
  for (const Kernel& k : kernels) {
    auto call = call_of.find(k.correlation);
    out.push_back({k.name, call == call_of.end() ? 0 : call->second, static_cast<int64_t>(k.start) + offset_ns,
                   static_cast<int64_t>(k.end) + offset_ns, k.stream});
  }
  return out;
}

namespace {
// The position of the first `c` outside template arguments at or after `from` (npos: none).
size_t find_outside_templates(const std::string& s, char c, size_t from = 0) {
  int depth = 0;
  for (size_t i = from; i < s.size(); ++i) {
    if (s[i] == '<') ++depth;
    if (s[i] == '>') --depth;
    if (depth == 0 && s[i] == c) return i;
  }
  return std::string::npos;
}
}  // namespace

std::string kernel_display_name(const char* name) {
  if (name == nullptr) return "(unnamed kernel)";
  int status = 0;
  char* demangled = abi::__cxa_demangle(name, nullptr, nullptr, &status);
  std::string s = status == 0 && demangled ? demangled : name;
  std::free(demangled);
  if (status != 0) return s;
  for (size_t at; (at = s.find("(anonymous namespace)::")) != std::string::npos;) s.erase(at, 23);
  s = s.substr(0, find_outside_templates(s, '('));  // the parameters
  const size_t space = find_outside_templates(s, ' ');
  if (space != std::string::npos) s = s.substr(space + 1);  // the return type
  for (size_t colon; (colon = find_outside_templates(s, ':')) != std::string::npos;) s = s.substr(colon + 2);
  return s;
}

}  // namespace cuda
}  // namespace tandem
