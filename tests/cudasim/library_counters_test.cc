// The cost records of the simulated libraries and copies: a convolution's arithmetic (2*N*K*C/g*R*S*P*Q, cuDNN's
// definition of the operation) and bytes in each pass, a GEMM's 2*m*n*k per matrix, copies and memsets, NCCL
// collectives per rank; and the dry mode, in which cuDNN and cuBLAS leave their outputs as they were.
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <cudnn.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "tests/cudasim/sim_testing.h"
#include "tools/cudasim/counters_abi.h"

namespace {

using cudasim_testing::DeviceBuffer;

std::vector<TandemCudasimOp> take_ops() {
  EXPECT_EQ(cudaDeviceSynchronize(), cudaSuccess);
  std::vector<TandemCudasimOp> out(256);
  out.resize(tandem_cudasim_take_ops(out.data(), out.size()));
  return out;
}

struct Recording {
  explicit Recording(int mode) { tandem_cudasim_counting(mode); }
  ~Recording() { tandem_cudasim_counting(TANDEM_CUDASIM_COUNTING_OFF); }
};

using Cudnn = cudasim_testing::LibraryOnDevice<cudnnHandle_t, cudnnStatus_t, cudnnCreate, cudnnSetStream, cudnnDestroy,
                                               CUDNN_STATUS_SUCCESS>;

TEST(CudasimLibraryCounters, ConvolutionPassesRecordTheirArithmeticAndOperands) {
  std::mt19937_64 g = cudasim_testing::rng();
  for (int trial = 0; trial < 3; ++trial) {
    const int groups = trial == 2 ? 4 : 1 + static_cast<int>(g() % 2);
    const int n = 1 + static_cast<int>(g() % 3), c = 4 * groups, h = 5 + static_cast<int>(g() % 6), w = h + 1;
    const int k = 2 * groups, r = 1 + 2 * static_cast<int>(g() % 2), stride = 1 + static_cast<int>(g() % 2);
    const int pad = r / 2, p = (h + 2 * pad - r) / stride + 1, q = (w + 2 * pad - r) / stride + 1;
    SCOPED_TRACE("n " + std::to_string(n) + " c " + std::to_string(c) + " groups " + std::to_string(groups));
    Cudnn d;
    cudnnTensorDescriptor_t xd, yd;
    cudnnFilterDescriptor_t wd;
    cudnnConvolutionDescriptor_t cd;
    ASSERT_EQ(cudnnCreateTensorDescriptor(&xd), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnCreateTensorDescriptor(&yd), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnCreateFilterDescriptor(&wd), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnCreateConvolutionDescriptor(&cd), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetTensor4dDescriptor(xd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, c, h, w), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetTensor4dDescriptor(yd, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, n, k, p, q), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetFilter4dDescriptor(wd, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, k, c / groups, r, r),
              CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(
        cudnnSetConvolution2dDescriptor(cd, pad, pad, stride, stride, 1, 1, CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
        CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetConvolutionGroupCount(cd, groups), CUDNN_STATUS_SUCCESS);
    ASSERT_EQ(cudnnSetConvolutionMathType(cd, CUDNN_TENSOR_OP_MATH), CUDNN_STATUS_SUCCESS);
    const size_t xs = static_cast<size_t>(n) * c * h * w, ws = static_cast<size_t>(k) * (c / groups) * r * r,
                 ys = static_cast<size_t>(n) * k * p * q;
    DeviceBuffer<float> x(0, std::vector<float>(xs, 0.5f)), wt(0, std::vector<float>(ws, 0.25f)), y(0, ys);
    const float one = 1, zero = 0;
    {
      Recording rec(TANDEM_CUDASIM_COUNTING_ON);
      // IMPLICIT_PRECOMP_GEMM (tensor cores: TF32) forward with beta 0, then backward data with beta 1 and
      // backward filter with beta 0 (ALGO_1 of each, which run grouped convolutions; no workspace needed
      // beyond what they ask).
      size_t bytes = 0;
      ASSERT_EQ(cudnnGetConvolutionForwardWorkspaceSize(d.handle, xd, wd, cd, yd,
                                                        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, &bytes),
                CUDNN_STATUS_SUCCESS);
      DeviceBuffer<char> ws_buf(0, std::max<size_t>(bytes, 1));
      ASSERT_EQ(cudnnConvolutionForward(d.handle, &one, xd, x.get(), wd, wt.get(), cd,
                                        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_PRECOMP_GEMM, ws_buf.get(), bytes, &zero,
                                        yd, y.get()),
                CUDNN_STATUS_SUCCESS);
      ASSERT_EQ(cudnnConvolutionBackwardData(d.handle, &one, wd, wt.get(), yd, y.get(), cd,
                                             CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, nullptr, 0, &one, xd, x.get()),
                CUDNN_STATUS_SUCCESS);
      ASSERT_EQ(cudnnConvolutionBackwardFilter(d.handle, &one, xd, x.get(), yd, y.get(), cd,
                                               CUDNN_CONVOLUTION_BWD_FILTER_ALGO_1, nullptr, 0, &zero, wd, wt.get()),
                CUDNN_STATUS_SUCCESS);
      const std::vector<TandemCudasimOp> ops = take_ops();
      ASSERT_EQ(ops.size(), 3u);
      const double flops = 2.0 * n * k * (c / groups) * r * r * p * q;
      const char* classes[] = {"conv_fwd", "conv_bwd_data", "conv_bwd_filter"};
      const double read[] = {4.0 * (xs + ws), 4.0 * (ws + ys + xs), 4.0 * (xs + ys)};
      const double written[] = {4.0 * ys, 4.0 * xs, 4.0 * ws};
      for (int i = 0; i < 3; ++i) {
        EXPECT_EQ(ops[i].kind, TANDEM_CUDASIM_LIBRARY);
        EXPECT_STREQ(ops[i].op_class, classes[i]);
        EXPECT_STREQ(ops[i].precision, "tf32");
        EXPECT_EQ(ops[i].flops, flops);
        EXPECT_EQ(ops[i].bytes_read, read[i]);
        EXPECT_EQ(ops[i].bytes_written, written[i]);
        EXPECT_EQ(ops[i].groups, groups);
      }
    }
    {
      // Dry: the record is the same, the output is not computed.
      std::vector<float> before = y.download();
      Recording rec(TANDEM_CUDASIM_COUNTING_DRY);
      ASSERT_EQ(cudnnConvolutionBackwardData(d.handle, &one, wd, wt.get(), yd, y.get(), cd,
                                             CUDNN_CONVOLUTION_BWD_DATA_ALGO_1, nullptr, 0, &zero, xd, x.get()),
                CUDNN_STATUS_SUCCESS);
      ASSERT_EQ(cudnnConvolutionForward(d.handle, &one, xd, x.get(), wd, wt.get(), cd,
                                        CUDNN_CONVOLUTION_FWD_ALGO_IMPLICIT_GEMM, nullptr, 0, &zero, yd, y.get()),
                CUDNN_STATUS_SUCCESS);
      const std::vector<TandemCudasimOp> ops = take_ops();
      ASSERT_EQ(ops.size(), 2u);
      EXPECT_STREQ(ops[1].precision, "f32");  // IMPLICIT_GEMM has no tensor-core kernels
      std::vector<float> after = y.download();
      EXPECT_EQ(std::memcmp(before.data(), after.data(), before.size() * sizeof(float)), 0);
    }
    cudnnDestroyTensorDescriptor(xd);
    cudnnDestroyTensorDescriptor(yd);
    cudnnDestroyFilterDescriptor(wd);
    cudnnDestroyConvolutionDescriptor(cd);
  }
}

using Cublas = cudasim_testing::LibraryOnDevice<cublasHandle_t, cublasStatus_t, cublasCreate, cublasSetStream,
                                                cublasDestroy, CUBLAS_STATUS_SUCCESS>;

TEST(CudasimLibraryCounters, GemmRecordsTwoMnkPerMatrix) {
  std::mt19937_64 g = cudasim_testing::rng();
  const int64_t m = 1 + g() % 20, n = 1 + g() % 20, k = 1 + g() % 20, batch = 1 + g() % 3;
  Cublas b;
  DeviceBuffer<float> A(0, std::vector<float>(m * k * batch, 1.0f)), B(0, std::vector<float>(k * n * batch, 1.0f)),
      C(0, static_cast<size_t>(m * n * batch));
  const float one = 1, zero = 0;
  Recording rec(TANDEM_CUDASIM_COUNTING_ON);
  ASSERT_EQ(cublasGemmStridedBatchedEx_64(b.handle, CUBLAS_OP_N, CUBLAS_OP_N, m, n, k, &one, A.get(), CUDA_R_32F, m,
                                          m * k, B.get(), CUDA_R_32F, k, k * n, &zero, C.get(), CUDA_R_32F, m, m * n,
                                          batch, CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT),
            CUBLAS_STATUS_SUCCESS);
  const std::vector<TandemCudasimOp> ops = take_ops();
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_STREQ(ops[0].op_class, "gemm");
  EXPECT_STREQ(ops[0].precision, "f32");
  EXPECT_EQ(ops[0].flops, 2.0 * m * n * k * batch);
  EXPECT_EQ(ops[0].bytes_read, 4.0 * (m * k + k * n) * batch);
  EXPECT_EQ(ops[0].bytes_written, 4.0 * m * n * batch);
  EXPECT_EQ(C.download()[0], static_cast<float>(k));
}

TEST(CudasimLibraryCounters, CopiesMemsetsAndCollectives) {
  DeviceBuffer<float> a(0, std::vector<float>(1000, 1.0f)), b(0, 1000u);
  int count = 0;
  ASSERT_EQ(cudaGetDeviceCount(&count), cudaSuccess);
  ASSERT_GE(count, 2);
  std::vector<ncclComm_t> comms(2);
  std::vector<int> devices = {0, 1};
  ASSERT_NCCL_OK(ncclCommInitAll(comms.data(), 2, devices.data()));
  DeviceBuffer<float> r0(0, std::vector<float>(64, 1.0f)), r1(1, std::vector<float>(64, 2.0f));
  {
    Recording rec(TANDEM_CUDASIM_COUNTING_ON);
    ASSERT_EQ(cudaMemcpyAsync(b.get(), a.get(), 4000, cudaMemcpyDeviceToDevice, a.stream()), cudaSuccess);
    ASSERT_EQ(cudaMemsetAsync(b.get(), 0, 400, a.stream()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(a.stream()), cudaSuccess);
    ASSERT_NCCL_OK(ncclGroupStart());
    ASSERT_NCCL_OK(ncclAllReduce(r0.get(), r0.get(), 64, ncclFloat32, ncclSum, comms[0], r0.stream()));
    ASSERT_NCCL_OK(ncclAllReduce(r1.get(), r1.get(), 64, ncclFloat32, ncclSum, comms[1], r1.stream()));
    ASSERT_NCCL_OK(ncclGroupEnd());
    ASSERT_EQ(cudaStreamSynchronize(r0.stream()), cudaSuccess);
    ASSERT_EQ(cudaStreamSynchronize(r1.stream()), cudaSuccess);
    const std::vector<TandemCudasimOp> ops = take_ops();
    ASSERT_EQ(ops.size(), 4u);
    EXPECT_EQ(ops[0].kind, TANDEM_CUDASIM_COPY);
    EXPECT_STREQ(ops[0].op_class, "copy_d2d");
    EXPECT_EQ(ops[0].bytes_read, 4000);
    EXPECT_EQ(ops[0].bytes_written, 4000);
    EXPECT_STREQ(ops[1].op_class, "memset");
    EXPECT_EQ(ops[1].bytes_written, 400);
    for (int i = 2; i < 4; ++i) {
      EXPECT_STREQ(ops[i].op_class, "all_reduce");
      EXPECT_EQ(ops[i].ranks, 2);
      EXPECT_EQ(ops[i].bytes_read, 256);
    }
    EXPECT_NE(ops[2].device, ops[3].device);
  }
  for (ncclComm_t c : comms) ncclCommDestroy(c);
}

}  // namespace
