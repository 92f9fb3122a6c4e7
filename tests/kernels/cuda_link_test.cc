// Runs everywhere: the CUDA backend library links into //kernels:all, and without a GPU asking for
// cuda:0 fails with a DeviceError that says why (with a GPU: cuda:0 is served by the CUDA backend).
#include <gtest/gtest.h>

#include <string>

#include "kernels/cuda/cuda_backend.h"
#include "runtime/base/error.h"
#include "runtime/memory/stream.h"
#include "runtime/memory/stream_check.h"
#include "runtime/tensor/backend.h"
#include "runtime/tensor/tensor.h"
#include "tests/testing.h"

namespace tandem {
namespace {

TEST(CudaBackendLink, Cuda0IsServedByTheCudaBackendOrFailsClearly) {
  if (cuda_available()) {
    // The stream checker serves a checking wrapper in its place: ask without it.
    const bool checking = stream_check::enabled();
    stream_check::set_enabled(false);
    EXPECT_NE(dynamic_cast<cuda::CudaBackend*>(&backend_for(Device::cuda(0))), nullptr);
    stream_check::set_enabled(checking);
    return;
  }
  try {
    backend_for(Device::cuda(0));
    FAIL() << "backend_for(cuda:0) succeeded without a GPU";
  } catch (const DeviceError& e) {
    const std::string msg = e.what();
    EXPECT_NE(msg.find("cuda:0"), std::string::npos) << msg;
    EXPECT_NE(msg.find("no CUDA GPU"), std::string::npos) << msg;
  }
  EXPECT_THROW(empty({4}, TensorOptions(DType::F32).with_device(Device::cuda(0))), DeviceError);
  EXPECT_THROW(Stream::create(Device::cuda(0)), DeviceError);
}

TEST(CudaBackendLink, KernelsRefuseANonCudaStreamBeforeTouchingTheGpu) {
  // Constructing the backend needs every virtual method defined: this is the link check proper.
  cuda::CudaBackend backend;
  StridedDesc d;
  d.ndim = 1;
  d.shape[0] = 4;
  d.strides[0] = 1;
  try {
    backend.fill({DType::F32, nullptr, d, 0.0}, Stream());
    FAIL() << "a CUDA kernel accepted the CPU stream";
  } catch (const DeviceError& e) {
    EXPECT_NE(std::string(e.what()).find("stream of cpu"), std::string::npos) << e.what();
  }
  EXPECT_THROW(backend.reduce({ReduceOp::Sum, DType::F32, nullptr, 1, 4, 1, nullptr, nullptr}, Stream()), DeviceError);
}

}  // namespace
}  // namespace tandem
