// Memory and copies across devices: a free waits for another device's stream that used the memory
// (record_stream, whose contract refuses a CPU stream for device memory), a copy between GPUs waits for the work
// that produced its source, and the host source of a copy to a GPU is free to go once the copy is queued.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <atomic>
#include <chrono>
#include <thread>

#include "runtime/base/error.h"
#include "runtime/memory/stream.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using tandem::testing::expect_bitwise_equal;

// Holds a CUDA stream at a host function until open() (or the destructor) lets it go on, so that a test can
// tell what other streams do while it is held.
class StreamGate {
 public:
  explicit StreamGate(const Stream& s) {
    EXPECT_EQ(cudaLaunchHostFunc(s.cuda(), &StreamGate::hold, &open_), cudaSuccess);
  }
  ~StreamGate() { open(); }
  void open() { open_.store(true); }

 private:
  static void CUDART_CB hold(void* open) {
    while (!static_cast<std::atomic<bool>*>(open)->load()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  std::atomic<bool> open_{false};
};

// True when the event completes within `ms` milliseconds.
bool completes_within(const Event& e, int ms) {
  const auto end = std::chrono::steady_clock::now() + std::chrono::milliseconds(ms);
  while (!e.query())
    if (std::chrono::steady_clock::now() > end) return false;
  return true;
}

// The freeing thread's current device is cuda:0 and the stream that used the memory belongs to cuda:1: the
// free's ordering event must be made on cuda:1 (CUDA refuses to record an event on another device's stream).
// The memory may then be handed out again on its allocation stream, whose writes must wait for the held copy
// on cuda:1, which reads the old values.
TEST(CrossDevice, FreeWaitsForAnotherDevicesStreamThatUsedTheMemory) {
  TD_REQUIRE_GPUS(2);
  const Device d0 = Device::cuda(0), d1 = Device::cuda(1);
  DeviceGuard on_d0(d0);
  const Stream copier = Stream::create(d1);
  Tensor copy;
  {
    Tensor x = full({4096}, 1.0, d0);
    current_stream(d0).synchronize();  // x is written: this test is about the free, not the copy's start
    StreamGate gate(copier);
    copy = x.to(d1, copier);               // records copier on x's storage
    x = Tensor();                          // the free, ordered after copier's copy
    Tensor reuse = full({4096}, 2.0, d0);  // the pool may hand x's block to its allocation stream again
    Event refilled;
    refilled.record(current_stream(d0));
    EXPECT_FALSE(completes_within(refilled, 200))
        << "freed memory was overwritten while a stream of " << d1 << " still had to read it";
    gate.open();
  }
  copier.synchronize();
  expect_bitwise_equal(copy, full({4096}, 1.0, Device::cpu()), "copy of freed memory");
  EXPECT_NO_THROW(current_stream(d0).synchronize());
}

TEST(CrossDevice, RecordStreamRefusesACpuStreamForDeviceMemory) {
  TD_REQUIRE_GPU();
  Tensor x = zeros({8}, Device::cuda(0));
  EXPECT_THROW(x.storage().record_stream(Stream::create(Device::cpu())), DeviceError);
  EXPECT_NO_THROW(zeros({8}, Device::cpu()).storage().record_stream(Stream::create(Device::cuda(0))));
}

// The source is written on cuda:0's current stream while that stream is held; a copy to cuda:1 queued on
// cuda:1's stream must not run before the write (Tensor::to, and copy_ through it).
TEST(CrossDevice, CopyToAnotherDeviceWaitsForTheSourceStream) {
  TD_REQUIRE_GPUS(2);
  const Device d0 = Device::cuda(0), d1 = Device::cuda(1);
  const uint64_t seed = tandem::testing::fresh_seed();
  Generator gen(seed);
  const Tensor want = randn({1000}, gen);
  for (bool through_copy : {false, true}) {
    SCOPED_TRACE(through_copy ? "copy_" : "to");
    Tensor src = zeros({1000}, d0), dst = zeros({1000}, d1);
    const Tensor staged = want.to(d0);
    current_stream(d0).synchronize();
    Event copied;
    {
      StreamGate gate(current_stream(d0));
      src.copy_(staged);  // queued behind the gate
      if (through_copy)
        dst.copy_(src);
      else
        dst = src.to(d1);
      copied.record(current_stream(d1));
      EXPECT_FALSE(completes_within(copied, 200)) << "the copy ran while its source's stream was held";
    }
    expect_bitwise_equal(dst, want, "copied");
  }
}

// Pageable memory is staged before cudaMemcpyAsync returns and cudaFreeHost waits for the device, so the host
// may drop its source right away: the stream checker must accept that free (pageable and pinned sources).
TEST(CrossDevice, HostSourceOfACopyToTheGpuMayBeFreedOnceQueued) {
  TD_REQUIRE_GPU();
  tandem::testing::StreamCheckOn checking;
  for (bool pinned : {false, true}) {
    try {
      Tensor host = full({64}, 3.0, TensorOptions().with_device(Device::cpu()).with_pinned(pinned));
      Tensor dev = host.to(Device::cuda(0));
      host = Tensor();
      expect_bitwise_equal(dev, full({64}, 3.0, Device::cpu()), pinned ? "pinned" : "pageable");
    } catch (const StreamOrderError& e) {
      ADD_FAILURE() << (pinned ? "pinned: " : "pageable: ") << e.what();
    }
  }
}

}  // namespace
}  // namespace tandem
