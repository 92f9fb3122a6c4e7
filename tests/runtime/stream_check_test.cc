// The stream checker's rules on two CPU streams: each wrong schedule written here is reported naming both
// accesses, and the same schedule with its order declared (event, synchronize, record_stream) is accepted.
#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "runtime/base/error.h"
#include "runtime/memory/stream.h"
#include "runtime/memory/stream_check.h"
#include "runtime/tensor/ops.h"
#include "runtime/tensor/rng.h"
#include "tests/testing.h"

namespace tandem {
namespace {

using testing::expect_bitwise_equal;
using testing::fresh_seed;

// The checker on for one test, and off (forgetting what it saw) after it; two named CPU streams.
class StreamCheck : public ::testing::Test {
 protected:
  void SetUp() override {
    stream_check::name_stream(a, "producer A");
    stream_check::name_stream(b, "consumer B");
  }

  // Runs f with `s` as the current stream.
  template <typename F>
  static auto on(const Stream& s, F f) {
    StreamGuard guard(s);
    return f();
  }
  // `waiter`'s later work waits for what `done` has queued so far (an event recorded on `done`).
  static void wait_for(const Stream& waiter, const Stream& done) {
    Event e;
    e.record(done);
    waiter.wait(e);
  }
  Tensor random_on(const Stream& s, int64_t n) {
    Generator gen(fresh_seed());
    return on(s, [&] { return randn({n}, gen); });
  }

  testing::StreamCheckOn on_;
  Stream a = Stream::create(Device::cpu());
  Stream b = Stream::create(Device::cpu());
};

// Runs f, which must throw StreamOrderError with every one of `parts` in its message.
void expect_violation(const std::function<void()>& f, const std::vector<std::string>& parts) {
  testing::expect_error<StreamOrderError>(f, parts);
}

TEST_F(StreamCheck, ReadAfterWriteOnAnotherStreamNeedsAnEvent) {
  Tensor x = random_on(a, 64);
  const std::string storage = "(256 bytes of activations on cpu, allocated on cpu stream " + std::to_string(a.id());
  expect_violation(
      [&] {
        stream_check::Context step("the consumer's step");
        on(b, [&] { return mul(x, 2.0); });
      },
      {"read after write", storage,
       "unary (a read) in the consumer's step on cpu stream " + std::to_string(b.id()) + " 'consumer B'",
       "random (a write) on cpu stream " + std::to_string(a.id()) + " 'producer A'", "Stream::wait"});

  Tensor x2 = random_on(a, 64);
  wait_for(b, a);
  Tensor y = on(b, [&] { return mul(x2, 2.0); });
  b.synchronize();  // before the host reads y
  expect_bitwise_equal(y, add(x2, x2));
}

TEST_F(StreamCheck, WriteAfterWriteOnAnotherStreamNeedsAnEvent) {
  Tensor x = random_on(a, 32);
  expect_violation([&] { on(b, [&] { return x.fill_(1.0); }); },
                   {"write after write", "fill (a write) on cpu stream " + std::to_string(b.id()),
                    "random (a write) on cpu stream " + std::to_string(a.id())});

  Tensor x2 = random_on(a, 32);
  wait_for(b, a);
  on(b, [&] { return x2.fill_(3.0); });
  b.synchronize();
  expect_bitwise_equal(x2, full({32}, 3.0));
}

TEST_F(StreamCheck, AnAllocationIsAWriteOfItsStream) {
  // A stream-ordered allocator hands the memory to the allocating stream: another stream's first use of it
  // (here a write, with nothing written on a before) must be ordered after the allocation.
  Tensor x = on(a, [] { return empty({48}); });
  expect_violation([&] { on(b, [&] { return x.fill_(2.0); }); },
                   {"write after write", "fill (a write) on cpu stream " + std::to_string(b.id()),
                    "allocation (a write) on cpu stream " + std::to_string(a.id())});

  Tensor x2 = on(a, [] { return empty({48}); });
  wait_for(b, a);
  on(b, [&] { return x2.fill_(2.0); });
  b.synchronize();
  expect_bitwise_equal(x2, full({48}, 2.0));
}

TEST_F(StreamCheck, WriteAfterReadOnAnotherStreamNeedsAnEvent) {
  Tensor x = random_on(a, 16);
  wait_for(b, a);
  Tensor y = on(b, [&] { return mul(x, 2.0); });
  expect_violation([&] { on(a, [&] { return x.fill_(0.0); }); },
                   {"write after read", "fill (a write) on cpu stream " + std::to_string(a.id()),
                    "unary (a read) on cpu stream " + std::to_string(b.id())});

  Tensor x2 = random_on(a, 16);
  wait_for(b, a);
  Tensor y2 = on(b, [&] { return mul(x2, 2.0); });
  wait_for(a, b);
  Tensor twice = on(b, [&] { return add(x2, x2); });  // still before the overwrite: b's clock covers a's write
  wait_for(a, b);
  on(a, [&] { return x2.fill_(0.0); });
  b.synchronize();
  expect_bitwise_equal(y2, twice);
}

TEST_F(StreamCheck, SynchronizingAStreamOrdersItBeforeEveryStreamsLaterWork) {
  Tensor x = random_on(a, 8);
  b.synchronize();  // the wrong stream: the host learns nothing about a
  expect_violation([&] { on(b, [&] { return mul(x, 2.0); }); }, {"read after write", "random (a write)"});

  Tensor x2 = random_on(a, 8);
  a.synchronize();
  Tensor y = on(b, [&] { return mul(x2, 2.0); });
  b.synchronize();
  expect_bitwise_equal(y, add(x2, x2));

  Tensor x3 = random_on(a, 8);
  Event written;
  written.record(a);
  written.synchronize();
  on(b, [&] { return x3.fill_(5.0); });
  b.synchronize();
  expect_bitwise_equal(x3, full({8}, 5.0));
}

TEST_F(StreamCheck, TheDefaultCpuStreamIsTheHostAndSynchronous) {
  Generator gen(fresh_seed());
  Tensor x = randn({8}, gen);  // the host: complete when it returns, so b may read it
  Tensor y = on(b, [&] { return mul(x, 2.0); });
  // The host reading what b wrote needs b synchronized, as a host read of device memory does.
  expect_violation([&] { mul(y, 1.0); }, {"read after write", "the default cpu stream (the host)",
                                          "unary (a write) on cpu stream " + std::to_string(b.id())});
  Tensor y2 = on(b, [&] { return mul(x, 3.0); });
  b.synchronize();
  expect_bitwise_equal(mul(y2, 1.0), mul(x, 3.0));
}

TEST_F(StreamCheck, AFreeMustComeAfterEveryUseOnOtherStreams) {
  // Reported at the next allocation of the freeing thread: the one that may reuse the memory.
  {
    Tensor x = random_on(a, 64);
    wait_for(b, a);
    Tensor y = on(b, [&] { return mul(x, 2.0); });
  }  // x is freed on a while b's read of it is not ordered before
  expect_violation([&] { random_on(a, 64); }, {"use before free", "allocated on cpu stream " + std::to_string(a.id()),
                                               "unary (a read) on cpu stream " + std::to_string(b.id()),
                                               "record_stream(cpu stream " + std::to_string(b.id())});
  // Or at the next synchronization, of any stream.
  {
    Tensor x = random_on(a, 64);
    wait_for(b, a);
    on(b, [&] { return mul(x, 2.0); });
  }
  expect_violation([&] { a.synchronize(); }, {"use before free", "unary (a read)"});

  // Declared: b recorded on the storage (the free waits for it), or a waiting for b's event before the free.
  {
    Tensor x = random_on(a, 64);
    wait_for(b, a);
    on(b, [&] { return mul(x, 2.0); });
    x.storage().record_stream(b);
  }
  EXPECT_NO_THROW(random_on(a, 64));
  {
    Tensor x = random_on(a, 64);
    wait_for(b, a);
    on(b, [&] { return mul(x, 2.0); });
    wait_for(a, b);
  }
  EXPECT_NO_THROW(a.synchronize());
}

TEST_F(StreamCheck, DisjointByteRangesOfOneStorageDoNotConflict) {
  // Communicators access slices of one buffer by byte range (e.g. an all-reduce's chunks).
  Tensor x = random_on(a, 64);
  a.synchronize();
  const char* base = static_cast<const char*>(x.raw_data());
  stream_check::on_op("chunk 0", a, {stream_check::writes(base, 128)});
  stream_check::on_op("chunk 1", b, {stream_check::writes(base + 128, 128)});
  expect_violation([&] { stream_check::on_op("overlap", b, {stream_check::reads(base + 64, 128)}); },
                   {"read after write", "overlap (a read of bytes [64, 192))", "chunk 0 (a write of bytes [0, 128))"});
}

TEST_F(StreamCheck, ThreadsIssuingAtOnceOnTheirOwnStreams) {
  Tensor shared = random_on(a, 256);
  Event ready;
  ready.record(a);
  constexpr int kThreads = 4, kSteps = 50;
  std::vector<Tensor> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t)
    threads.emplace_back([&, t] {
      Stream mine = Stream::create(Device::cpu());
      StreamGuard guard(mine);
      mine.wait(ready);
      Tensor acc = zeros({256});
      for (int i = 0; i < kSteps; ++i) acc = add(acc, shared);
      results[t] = acc;
      mine.synchronize();
    });
  for (auto& t : threads) t.join();
  ready.synchronize();  // the host reads `shared` below
  Tensor expected = zeros({256});
  for (int i = 0; i < kSteps; ++i) expected = add(expected, shared);
  for (int t = 0; t < kThreads; ++t) expect_bitwise_equal(results[t], expected, "thread " + std::to_string(t));
}

TEST(StreamCheckOff, WrongSchedulesRunUnreportedWhenOff) {
  stream_check::set_enabled(false);
  Stream a = Stream::create(Device::cpu()), b = Stream::create(Device::cpu());
  Generator gen(fresh_seed());
  Tensor x;
  {
    StreamGuard g(a);
    x = randn({16}, gen);
  }
  StreamGuard g(b);
  Tensor y = mul(x, 2.0);
  expect_bitwise_equal(y, add(x, x));
}

}  // namespace
}  // namespace tandem
