// ThreadContext carries each part of a thread's state to another thread and restores that thread's own after.
#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/parallel_for.h"
#include "runtime/memory/stream_check.h"
#include "runtime/tensor/autograd.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/thread_context.h"
#include "tests/testing.h"

namespace tandem {
namespace {

// What a test reads of a thread's state.
struct Seen {
  Device device;
  Stream cpu_stream;
  bool grad = true;
  MemoryCategory category = MemoryCategory::Activations;
  std::vector<std::shared_ptr<MemoryTracker>> scopes;
  int threads = 0;
  std::string check_context;
};

Seen seen() {
  Seen s;
  s.device = current_device();
  s.cpu_stream = current_stream(Device::cpu());
  s.grad = autograd::grad_enabled();
  s.category = current_memory_category();
  s.scopes = current_memory_scopes();
  s.threads = intra_op_threads();
  std::shared_ptr<const std::string> c = stream_check::current_context();
  s.check_context = c ? *c : "";
  return s;
}

TEST(ThreadContext, CarriesEveryPartToAnotherThreadAndRestoresItsOwnAfter) {
  const Stream tag = Stream::create(Device::cpu());
  auto tracker = std::make_shared<MemoryTracker>("parent's scope");
  const int threads = intra_op_threads() + 2;
  ThreadContext captured;
  {
    StreamGuard stream(tag);
    autograd::NoGradGuard no_grad;
    MemoryCategoryGuard category(MemoryCategory::Gradients);
    MemoryScope scope(tracker);
    stream_check::Context context("step 7");
    set_intra_op_threads(threads);
    captured = ThreadContext::capture();
    set_intra_op_threads(threads - 2);
  }
  Seen inside, after, fresh;
  int64_t charged = 0;
  std::thread([&] {
    fresh = seen();
    {
      ThreadContextGuard guard(captured);
      inside = seen();
      Tensor t = empty({256}, TensorOptions(DType::F32).with_device(Device::cpu()));
      charged = tracker->counters().cur(MemoryCategory::Gradients);
    }
    after = seen();
  }).join();

  EXPECT_TRUE(inside.cpu_stream == tag);
  EXPECT_FALSE(inside.grad);
  EXPECT_EQ(inside.category, MemoryCategory::Gradients);
  ASSERT_EQ(inside.scopes.size(), 1u);
  EXPECT_EQ(inside.scopes[0], tracker);
  EXPECT_EQ(inside.threads, threads);
  EXPECT_EQ(inside.check_context, "step 7");
  EXPECT_EQ(charged, 1024) << "an allocation on the other thread is charged to the carried scope and category";

  EXPECT_TRUE(after.cpu_stream == fresh.cpu_stream);
  EXPECT_TRUE(after.cpu_stream == Stream()) << "a new thread's CPU stream is the default one";
  EXPECT_TRUE(after.grad);
  EXPECT_EQ(after.category, MemoryCategory::Activations);
  EXPECT_TRUE(after.scopes.empty());
  EXPECT_EQ(after.threads, fresh.threads);
  EXPECT_EQ(after.check_context, "");
}

TEST(ThreadContext, GuardOnAThreadWithItsOwnStateRestoresIt) {
  const Stream mine = Stream::create(Device::cpu()), theirs = Stream::create(Device::cpu());
  auto my_tracker = std::make_shared<MemoryTracker>("mine");
  ThreadContext other;
  other.streams = {theirs};
  other.grad_enabled = false;
  other.memory_category = MemoryCategory::Parameters;

  StreamGuard stream(mine);
  MemoryScope scope(my_tracker);
  stream_check::Context context("my step");
  const Seen before = seen();
  {
    ThreadContextGuard guard(other);
    const Seen during = seen();
    EXPECT_TRUE(during.cpu_stream == theirs);
    EXPECT_FALSE(during.grad);
    EXPECT_EQ(during.category, MemoryCategory::Parameters);
    EXPECT_TRUE(during.scopes.empty()) << "the context's scopes replace the thread's";
    EXPECT_EQ(during.check_context, "");
    EXPECT_EQ(during.threads, before.threads) << "intra_op_threads 0 keeps the thread's own";
  }
  const Seen restored = seen();
  EXPECT_TRUE(restored.cpu_stream == mine);
  EXPECT_TRUE(restored.grad);
  EXPECT_EQ(restored.category, before.category);
  ASSERT_EQ(restored.scopes.size(), 1u);
  EXPECT_EQ(restored.scopes[0], my_tracker);
  EXPECT_EQ(restored.check_context, "my step");
}

TEST(ThreadContext, CarriesTheCudaDeviceAndItsStream) {
  TD_REQUIRE_GPU();
  const Device gpu = Device::cuda(cuda_device_count() - 1);
  const Stream s = Stream::create(gpu);
  ThreadContext captured;
  {
    StreamGuard guard(s);
    captured = ThreadContext::capture();
  }
  EXPECT_EQ(captured.device, gpu);
  Device device_inside, device_after;
  bool same_stream = false;
  std::thread([&] {
    {
      ThreadContextGuard guard(captured);
      device_inside = current_device();
      same_stream = current_stream(gpu) == s;
    }
    device_after = current_device();
  }).join();
  EXPECT_EQ(device_inside, gpu);
  EXPECT_TRUE(same_stream);
  EXPECT_EQ(device_after, Device::cpu());
}

}  // namespace
}  // namespace tandem
