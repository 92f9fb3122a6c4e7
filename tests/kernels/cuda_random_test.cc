// CUDA Philox fills against the CPU backend: the same (seed, offset) gives the same bits.
#include <gtest/gtest.h>

#include <string>

#include "tests/kernels/kernel_compare.h"
#include "tests/testing.h"

namespace tandem {
namespace testing {
namespace {

TEST(CudaRandom, UniformAndNormalAreBitIdenticalToTheCpu) {
  TD_REQUIRE_GPU();
  const RandomSpec specs[] = {{false, 0.0, 1.0}, {false, -2.5, 7.0}, {true, 0.0, 1.0}, {true, 1.5, 0.3}};
  for (DType t : {DType::F32, DType::F64})
    for (const RandomSpec& spec : specs)
      for (int64_t n : {int64_t{1}, int64_t{3}, int64_t{4}, int64_t{1001}, int64_t{1} << 18})
        for (uint64_t offset : {uint64_t{0}, uint64_t{7}, (uint64_t{1} << 32) + 5})
          for (int64_t shift : {0, 1}) {
            const uint64_t seed = fresh_seed();
            const std::string what = std::string(spec.normal ? "normal " : "uniform ") + dtype_name(t) +
                                     " n=" + std::to_string(n) + " offset=" + std::to_string(offset) +
                                     " shift=" + std::to_string(shift);
            Tensor want = empty({n}, t);
            cpu_backend().random({t, want.raw_data(), n, seed, offset, spec}, Stream());
            Guarded got(t, n, Device::cuda(0), shift);
            gpu_backend().random({t, got.data(), n, seed, offset, spec}, gpu_stream());
            expect_bitwise_equal(to_host(got.middle()), want, what);
            got.expect_intact(what);
          }
}

}  // namespace
}  // namespace testing
}  // namespace tandem
