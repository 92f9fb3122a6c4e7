// Thread setup on a GPU (runtime/memory/cuda_thread.h): a worker's cuBLAS and cuDNN handles are made and Tandem's
// kernels loaded before its work starts, so that its first GEMM, convolution and kernel wait for none of its device's
// streams; a lane that would get a handle at first use is refused under the stream checker. On the simulated GPU a
// handle's creation and a kernel's first load wait for every stream of the device, as the driver does, and its
// watchdog (TANDEM_CUDASIM_WATCHDOG_S, 30 s for this test's own target) turns the hang that a worker making its
// handle at its first GEMM met on an H200 into a fault. Skips without a GPU.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <future>
#include <thread>
#include <vector>

#include "parallel/worker.h"
#include "runtime/base/cuda_check.h"
#include "runtime/memory/cuda_thread.h"
#include "runtime/nn/nn_ops.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace parallel {
namespace {

void CUDART_CB wait_for_gate(void* gate) { static_cast<std::shared_future<void>*>(gate)->wait(); }

// Holds `s` at a host function until open() (or destruction) lets it go on.
class Gate {
 public:
  explicit Gate(const Stream& s) : s_(s), shared_(opened_.get_future().share()) {
    TD_CUDA_CHECK(cudaLaunchHostFunc(s.cuda(), wait_for_gate, &shared_));
  }
  ~Gate() {
    open();
    cudaStreamSynchronize(s_.cuda());  // not Stream::synchronize, which throws when the device has faulted
  }
  void open() {
    if (!open_) opened_.set_value();
    open_ = true;
  }

 private:
  Stream s_;
  std::promise<void> opened_;
  std::shared_future<void> shared_;
  bool open_ = false;
};

// A GEMM (cuBLAS), a convolution (cuDNN) and a ReLU (a Tandem kernel) on the current stream, against the CPU (the
// tests turn TF32 off, whose rounding would exceed the tolerance).
void compute_and_check(Device device) {
  Generator gen(tandem::testing::fresh_seed());
  const Tensor a = randn({5, 7}, gen), b = randn({7, 3}, gen);
  const Tensor x = randn({2, 3, 6, 6}, gen), w = randn({4, 3, 3, 3}, gen);
  Conv2dOptions o;
  o.pad_h = o.pad_w = 1;
  const Tensor ab = matmul(a.to(device), b.to(device)), y = relu(conv2d(x.to(device), w.to(device), Tensor(), o));
  tandem::testing::expect_close(ab.to(Device::cpu()), matmul(a, b), 1e-5, "GEMM");
  tandem::testing::expect_close(y.to(Device::cpu()), relu(conv2d(x, w, Tensor(), o)), 1e-5, "convolution and ReLU");
}

// The worker's comm stream waits for the worker itself while its first GEMM, convolution and kernels run on the
// compute stream: they finish only if nothing in them waits for the device's streams.
TEST(CudaThread, AWorkersFirstGemmConvolutionAndKernelsWaitForNoneOfItsStreams) {
  TD_REQUIRE_GPU();
  tandem::testing::NumericsGuard numerics(/*tf32=*/false, /*deterministic_mode=*/false);
  std::vector<Worker> workers = make_workers("cuda:0");
  run_on_workers(workers, [&](Worker& w) {
    Gate gate(w.comm);
    compute_and_check(w.device);
    EXPECT_EQ(cudaStreamQuery(w.comm.cuda()), cudaErrorNotReady) << "the comm stream was held all along";
    gate.open();
  });
}

// A program's own thread prepares itself, then blocks one of its streams and works on another.
TEST(CudaThread, AProgramsThreadThatPreparesItselfMayBlockAStreamBeforeItsFirstGemm) {
  TD_REQUIRE_GPU();
  tandem::testing::NumericsGuard numerics(/*tf32=*/false, /*deterministic_mode=*/false);
  const Device device = Device::cuda(cuda_device_count() - 1);
  std::thread t([&] {
    prepare_cuda_thread(device);
    const Stream held = Stream::create(device), work = Stream::create(device);
    Gate gate(held);
    StreamGuard on_work(work);
    compute_and_check(device);
    gate.open();
  });
  t.join();
}

// Inside a schedule's lane, a thread without a handle of its own is refused one (whether or not a pooled one is
// free); prepared, the same thread gets its handle there.
TEST(CudaThread, ALaneThatWouldGetAHandleAtFirstUseIsRefusedUnderTheStreamChecker) {
  TD_REQUIRE_GPU();
  tandem::testing::NumericsGuard numerics(/*tf32=*/false, /*deterministic_mode=*/false);
  tandem::testing::StreamCheckOn checking;
  const Device device = Device::cuda(0);
  Generator gen(tandem::testing::fresh_seed());
  const Tensor a = randn({4, 4}, gen).to(device);
  std::thread t([&] {
    LaneScope lane;
    tandem::testing::expect_error<BackendError>(
        [&] { matmul(a, a); },
        {"this thread has no cuBLAS handle for cuda:0", "inside a schedule's lane", "prepare_cuda_thread"});
    prepare_cuda_thread(device);
    Tensor aa = matmul(a, a);
    current_stream(device).synchronize();
    tandem::testing::expect_close(aa.to(Device::cpu()), matmul(a.to(Device::cpu()), a.to(Device::cpu())), 1e-5,
                                  "the GEMM of a prepared lane");
  });
  t.join();
}

}  // namespace
}  // namespace parallel
}  // namespace tandem
