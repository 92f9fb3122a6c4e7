// The memory pool keeps what Tandem frees, for reuse; the libraries' own allocations (cuBLAS and cuDNN handles,
// NCCL buffers) come from outside it and must still find room on a device the pool has filled once. Runs with
// a small simulated GPU (TANDEM_CUDASIM_MEMORY_MB in BUILD); on a real GPU it only checks that the calls work.
#include <gtest/gtest.h>

#include <vector>

#include "runtime/memory/storage.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

TEST(PoolRelease, LibraryHandlesFindRoomOnADeviceThePoolFilledOnce) {
  TD_REQUIRE_GPU();
  const Device gpu = Device::cuda(0);
  DeviceGuard guard(gpu);
  {
    // 48 of the simulated device's 64 MiB, freed: the pool keeps them (its release threshold is the maximum).
    Tensor big = empty({12 << 20}, TensorOptions(DType::F32).with_device(gpu));
    current_stream(gpu).synchronize();
  }
  current_stream(gpu).synchronize();
  // The first GEMM of this thread makes its cuBLAS handle (32 MiB of workspace on the simulated GPU).
  Generator g(tandem::testing::fresh_seed());
  Tensor a = randn({8, 16}, g), b = randn({16, 4}, g);
  Tensor want = matmul(a, b);
  Tensor got = matmul(a.to(gpu), b.to(gpu)).to(Device::cpu());
  tandem::testing::expect_close(got, want, 1e-5, "matmul after the pool held most of the device");
}

}  // namespace
}  // namespace tandem
