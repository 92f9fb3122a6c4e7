// The CUPTI timer's parts that run without a GPU: kernel names as the tables show them (mangled names from the
// Itanium C++ ABI, as g++ and nvcc emit them), synthetic activity records tied to the profiler's calls, and the
// loader's refusal when no libcupti opens.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "kernels/cuda/cupti_records.h"
#include "kernels/cuda/cupti_timer.h"

namespace tandem {
namespace cuda {
namespace {

TEST(Cupti, KernelNamesLoseNamespacesReturnTypeAndParameters) {
  // void tandem::cuda::(anonymous namespace)::binary_kernel<float, 4>(float const*, float*, int)
  EXPECT_EQ(kernel_display_name("_ZN6tandem4cuda12_GLOBAL__N_113binary_kernelIfLi4EEEvPKT_PS3_i"),
            "binary_kernel<float, 4>");
  // void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm_128x128>(cutlass_80_tensorop_s1688gemm_128x128::Params)
  EXPECT_EQ(kernel_display_name("_ZN7cutlass7Kernel2I37cutlass_80_tensorop_s1688gemm_128x128EEvNT_6ParamsE"),
            "Kernel2<cutlass_80_tensorop_s1688gemm_128x128>");
  EXPECT_EQ(kernel_display_name("sm90_xmma_fprop_implicit_gemm_tf32f32"), "sm90_xmma_fprop_implicit_gemm_tf32f32");
  EXPECT_EQ(kernel_display_name(nullptr), "(unnamed kernel)");
}

// A record of `kind` with every other field zero, as CUPTI leaves the fields a record does not use.
template <class Record>
Record zeroed(CUpti_ActivityKind kind) {
  Record r;
  std::memset(&r, 0, sizeof r);
  r.kind = kind;
  return r;
}

CUpti_ActivityKernel10 kernel_record(const char* name, uint32_t correlation, uint64_t start, uint64_t end) {
  auto k = zeroed<CUpti_ActivityKernel10>(CUPTI_ACTIVITY_KIND_CONCURRENT_KERNEL);
  k.name = name;
  k.correlationId = correlation;
  k.start = start;
  k.end = end;
  k.streamId = 7;
  return k;
}

CUpti_ActivityExternalCorrelation correlation_record(CUpti_ExternalCorrelationKind kind, uint64_t external,
                                                     uint32_t correlation) {
  auto c = zeroed<CUpti_ActivityExternalCorrelation>(CUPTI_ACTIVITY_KIND_EXTERNAL_CORRELATION);
  c.externalKind = kind;
  c.externalId = external;
  c.correlationId = correlation;
  return c;
}

TEST(Cupti, KernelRecordsBelongToTheCallsTheirCorrelationRecordsName) {
  CuptiRecords records;
  auto add = [&](const auto& record) { records.add(reinterpret_cast<const CUpti_Activity&>(record)); };
  add(correlation_record(kProfilerCorrelation, 5, 42));
  add(correlation_record(CUPTI_EXTERNAL_CORRELATION_KIND_CUSTOM1, 99, 43));  // another tool's: ignored
  add(kernel_record("_ZN6tandem4cuda12_GLOBAL__N_113binary_kernelIfLi4EEEvPKT_PS3_i", 42, 1000, 3000));
  add(kernel_record("sm90_xmma_dgrad", 43, 4000, 4500));
  add(zeroed<CUpti_Activity>(CUPTI_ACTIVITY_KIND_MEMCPY));  // not a kernel: ignored
  std::vector<profiler::DeviceKernel> kernels = records.device_kernels(-500);
  ASSERT_EQ(kernels.size(), 2u);
  EXPECT_EQ(kernels[0].name, "binary_kernel<float, 4>");
  EXPECT_EQ(kernels[0].call, 5u);
  EXPECT_EQ(kernels[0].start_ns, 500);
  EXPECT_EQ(kernels[0].end_ns, 2500);
  EXPECT_EQ(kernels[0].stream, 7u);
  EXPECT_EQ(kernels[1].name, "sm90_xmma_dgrad");
  EXPECT_EQ(kernels[1].call, 0u);  // launched outside the profiler's calls
}

TEST(Cupti, ALibraryThatDoesNotOpenIsRefusedWithTheLoadersReason) {
  std::string why;
  EXPECT_FALSE(load_cupti({"/nonexistent/libcupti.so"}, &why));
  EXPECT_EQ(why.find("CUPTI is not available: /nonexistent/libcupti.so"), 0u) << why;
  EXPECT_EQ(why.find('\n'), std::string::npos) << why;
}

TEST(Cupti, TheLibraryCanBeChosenByEnvironment) {
  setenv("TANDEM_CUPTI_LIBRARY", "/opt/cupti/libcupti.so.13", 1);
  EXPECT_EQ(cupti_libraries(), std::vector<std::string>{"/opt/cupti/libcupti.so.13"});
  unsetenv("TANDEM_CUPTI_LIBRARY");
  EXPECT_EQ(cupti_libraries().front(), "libcupti.so.13");
}

}  // namespace
}  // namespace cuda
}  // namespace tandem
