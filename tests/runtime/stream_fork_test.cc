// StreamFork's fork and join are the orders the stream checker asks for between a parent and its side streams.
#include <gtest/gtest.h>

#include "runtime/base/error.h"
#include "runtime/memory/stream_fork.h"
#include "runtime/tensor/ops.h"
#include "tests/testing.h"

namespace tandem {
namespace {

// A tensor written on the parent and read on a side stream, then written on the side stream and read on the
// parent: the checker refuses both without the fork and the join, and accepts them with it.
TEST(StreamFork, ForkAndJoinAreTheOrdersTheStreamCheckerAsksFor) {
  testing::StreamCheckOn check;
  const Stream parent = Stream::create(Device::cpu()), side = Stream::create(Device::cpu());
  auto write_on = [](const Stream& s, Tensor& t) {
    StreamGuard g(s);
    t.fill_(1.0);
  };
  auto read_on = [](const Stream& s, const Tensor& t) {
    StreamGuard g(s);
    return mul(t, 2.0);
  };
  auto fresh = [&] {
    StreamGuard g(parent);
    return zeros({8});
  };

  Tensor x = fresh();
  testing::expect_error<StreamOrderError>([&] { read_on(side, x); }, "read after write");
  Tensor y = fresh();
  {
    StreamFork fork(parent, {side});
    read_on(side, y);
    write_on(side, y);
    testing::expect_error<StreamOrderError>([&] { read_on(parent, y); }, "read after write");
  }
  Tensor z = fresh();
  {
    StreamFork fork(parent, {side});
    write_on(side, z);
    fork.join();
    read_on(parent, z);
  }
  Tensor w = fresh();
  {
    StreamFork fork(parent, {side});
    write_on(side, w);
  }  // joined by the destructor
  read_on(parent, w);
}

}  // namespace
}  // namespace tandem
