// cuda::workspace during the capture of a CUDA graph: the graph gets a buffer of its own (not the stream's cached
// one, which eager work may grow, that is free, between replays) and the cache comes out of the capture untouched.
#include <gtest/gtest.h>

#include "kernels/cuda/launch.h"
#include "runtime/memory/cuda_graph.h"
#include "runtime/memory/stream.h"
#include "tests/testing.h"

namespace tandem {
namespace {

TEST(WorkspaceInCapture, TheGraphGetsItsOwnBufferAndTheCacheIsLeftAlone) {
  TD_REQUIRE_GPU();
  Stream s = Stream::create(Device::cuda(0));
  void* cached = cuda::workspace(4096, s).data();
  ASSERT_NE(cached, nullptr);
  ASSERT_EQ(cuda::workspace(1024, s).data(), cached);  // the steady state: the cached buffer again
  void *same_size = nullptr, *larger = nullptr;
  CudaGraph g;
  // A larger request would grow (free) the cached buffer inside the capture, which fails the capture.
  g.capture(s, [&] {
    same_size = cuda::workspace(4096, s).data();
    larger = cuda::workspace(1 << 20, s).data();
  });
  EXPECT_NE(same_size, cached);
  EXPECT_NE(larger, cached);
  EXPECT_NE(same_size, nullptr);
  g.replay();
  s.synchronize();
  EXPECT_EQ(cuda::workspace(4096, s).data(), cached);
}

}  // namespace
}  // namespace tandem
